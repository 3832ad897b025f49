package redis

import "strings"

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// slot returns the Cluster hash slot of key: CRC16 (XMODEM) of the key, or
// of the first non-empty "{...}" hash tag in it, modulo 16384. GetMany and
// Delete group keys by it because a multi-key command in a Cluster must not
// span slots (rueidis refuses to build one).
func slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % slotCount
}

// Slot returns the Redis Cluster hash slot of a key as stored, KeyPrefix
// included: for tools that map keys to nodes (the lab does).
func Slot(key string) uint16 { return slot(key) }
