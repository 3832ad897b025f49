package lab

import "testing"

// keySlot against slots Redis itself computes (CLUSTER KEYSLOT), and its
// hash-tag rule: only the first non-empty {...} is hashed.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":       12182,
		"123456789": 12739, // CRC16/XMODEM check value 0x31C3
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("{user1000}.following") != keySlot("user1000") || keySlot("x{user1000}{y}") != keySlot("user1000") {
		t.Error("a hash tag is not what is hashed")
	}
	if keySlot("a{}b") == keySlot("") {
		t.Error("an empty hash tag must hash the whole key")
	}
}
