package redis

import "testing"

// TestSlotKnownValues: slots Redis itself computes (CLUSTER KEYSLOT), and
// the hash-tag rule: only the first non-empty {...} is hashed. (TestCluster
// checks many more keys against a real server.)
func TestSlotKnownValues(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":       12182,
		"123456789": 12739, // CRC16/XMODEM check value 0x31C3
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("{user1000}.following") != Slot("user1000") || Slot("x{user1000}{y}") != Slot("user1000") {
		t.Error("a hash tag is not what is hashed")
	}
	if Slot("a{}b") == Slot("") {
		t.Error("an empty hash tag must hash the whole key")
	}
}

// slotOf is slot of the concatenation, hash tags and all, for every prefix
// a Tier accepts (none holds a brace).
func TestSlotOfPrefixAndKey(t *testing.T) {
	for _, prefix := range []string{"", "shop:", "a"} {
		for _, key := range []string{"", "product:1", "{user1}:cart", "a{}b", "x{y", "}{z}", "pre{tag}post{other}", "{", "{}"} {
			if got, want := slotOf(prefix, key), slot(prefix+key); got != want {
				t.Errorf("slotOf(%q, %q) = %d, slot of the whole = %d", prefix, key, got, want)
			}
		}
	}
}
