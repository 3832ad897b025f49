package lab

import "testing"

func TestParseIdleSample(t *testing.T) {
	text := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_ping:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_cluster|slots:calls=3,usec=300,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n"
	s, err := parseIdleSample(text)
	if err != nil {
		t.Fatal(err)
	}
	if s.cpu != 2 || s.calls["ping"] != 12 || s.usec["ping"] != 30 || s.calls["cluster|slots"] != 3 || s.usec["cluster|slots"] != 300 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := parseIdleSample("# CPU\r\nused_cpu_user:1\r\n"); err == nil {
		t.Fatal("INFO without used_cpu_sys parsed")
	}
}
