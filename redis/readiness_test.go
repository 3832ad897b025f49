package redis

import "testing"

func TestReadiness(t *testing.T) {
	const lag = 1000
	for _, c := range []struct {
		name          string
		info          string
		primaryOffset int64
		ready         bool
	}{
		{"primary", "role:master\r\nmaster_repl_offset:500\r\nloading:0\r\n", -1, true},
		{"primary loading", "role:master\r\nmaster_repl_offset:0\r\nloading:1\r\n", -1, false},
		{"replica in sync", "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:9500\r\n# Persistence\r\nloading:0\r\n", 10000, true},
		{"replica lagging", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:8000\r\nloading:0\r\n", 10000, false},
		{"replica, primary unknown", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:8000\r\nloading:0\r\n", -1, true},
		{"replica syncing", "role:slave\r\nmaster_link_status:down\r\nmaster_sync_in_progress:1\r\nslave_repl_offset:1\r\nloading:0\r\n", 10, false},
		{"replica link up, still syncing", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:1\r\nslave_repl_offset:10\r\nloading:0\r\n", 10, false},
		{"replica loading", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:10\r\nloading:1\r\n", 10, false},
		{"replica link down", "role:slave\r\nmaster_link_status:down\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:10\r\nloading:0\r\n", 10, false},
		{"replica before first sync", "role:slave\r\nmaster_link_status:down\r\nmaster_sync_in_progress:0\r\nloading:0\r\n", 10, false},
		{"replica without persistence section", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:10\r\n", 10, false},
	} {
		rs, err := parseReplState(parseInfo(c.info))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ready, reason := readiness(rs, c.primaryOffset, lag)
		if ready != c.ready {
			t.Errorf("%s: ready %v (%s), want %v", c.name, ready, reason, c.ready)
		}
		if !ready && reason == "" {
			t.Errorf("%s: not ready without a reason", c.name)
		}
	}
	if _, err := parseReplState(parseInfo("loading:0\r\n")); err == nil {
		t.Error("INFO without role accepted")
	}
}
