package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMainRuns(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "tiny.lirs")
	if err := os.WriteFile(trace, []byte(strings.Repeat("1\n2\n3\n", 50)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Capacities of several entries a shard of holdfast's store (32 on 2
	// cores), so that the trace's three keys fit whichever shards they
	// hash to: with one entry a shard, two keys of a shard evict each
	// other.
	var out, errs strings.Builder
	m := &Main{Stdout: &out, Stderr: &errs}
	args := []string{"-workloads", "loop", "-capacities", "128,256", "-requests", "2000", "-caches", "holdfast,lru",
		"-trace", trace, "-format", "lirs", "-out", dir}
	if err := m.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| workload | capacity | holdfast | lru | belady |", "| loop | 256 | ", "| tiny.lirs | 128 | 98.00 | 98.00 | 98.00 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"loop.svg", "tiny.lirs.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-equal", "weight"},
		{"-capacities", "10,x"},
		{"-capacities", "0"},
		{"-workloads", "zipf-0.9,nope"},
		{"-caches", "memcached"},
		{"-trace", "/nonexistent/trace", "-format", "arc"},
		{"stray"},
	} {
		m := &Main{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}}
		if err := m.ParseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
