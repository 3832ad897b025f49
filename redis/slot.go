package redis

import "strings"

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// slot returns the Cluster hash slot of key: CRC16 (XMODEM) of the key, or
// of the first non-empty "{...}" hash tag in it, modulo 16384. GetMany and
// Delete group keys by it because a multi-key command in a Cluster must not
// span slots (rueidis refuses to build one).
func slot(key string) uint16 { return slotOf("", key) }

// slotOf is slot(prefix + key) without building the string. A prefix never
// holds a brace (KeyPrefix is refused with one), so a hash tag can only be
// in key.
func slotOf(prefix, key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return crc16("", key[s+1:s+1+e]) % slotCount
		}
	}
	return crc16(prefix, key) % slotCount
}

// crc16 is CRC16 (XMODEM) of a followed by b.
func crc16(a, b string) uint16 {
	var crc uint16
	for _, s := range [2]string{a, b} {
		for i := 0; i < len(s); i++ {
			crc ^= uint16(s[i]) << 8
			for range 8 {
				if crc&0x8000 != 0 {
					crc = crc<<1 ^ 0x1021
				} else {
					crc <<= 1
				}
			}
		}
	}
	return crc
}

// Slot returns the Redis Cluster hash slot of a key as stored, KeyPrefix
// included: for tools that map keys to nodes (the lab does).
func Slot(key string) uint16 { return slot(key) }
