package hitratio

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleResult() *Result {
	r := &Result{Mode: EqualBytes, ValueBytes: 64, EntryCost: 328, Caches: []string{HoldfastName, "lru", BeladyName}}
	for _, c := range []int{100, 400} {
		r.Sizings = append(r.Sizings, Sizing{
			Capacity:      c,
			Budget:        int64(c) * 328,
			Entries:       map[string]int{HoldfastName: c, "lru": 2 * c, BeladyName: 2 * c},
			BytesPerEntry: map[string]float64{HoldfastName: 300, "lru": 164},
		})
	}
	for _, w := range []string{"zipf-0.9", "trace/oltp"} {
		for i, c := range []int{100, 400} {
			r.Rows = append(r.Rows, Row{Workload: w, Capacity: c, Requests: 1000,
				HitRatio: map[string]float64{HoldfastName: 10 + float64(i), "lru": 20.125, BeladyName: 42}})
		}
	}
	return r
}

func TestMarkdown(t *testing.T) {
	var b strings.Builder
	if err := sampleResult().Markdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| workload | capacity | holdfast | lru | belady |",
		"| zipf-0.9 | 400 | 11.00 | 20.12 | 42.00 |",
		"| trace/oltp | 100 | 10.00 | 20.12 | 42.00 |",
		"| 400 | 128 KiB | 400 (300) | 800 (164) | 800 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A chart is well-formed SVG with a line and a legend entry a cache, its
// axes labelled.
func TestChart(t *testing.T) {
	r := sampleResult()
	var b bytes.Buffer
	if err := r.Chart(&b, "zipf-0.9"); err != nil {
		t.Fatal(err)
	}
	lines, texts := 0, []string{}
	d := xml.NewDecoder(&b)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "polyline" {
				lines++
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	if lines != len(r.Caches) {
		t.Errorf("%d lines for %d caches", lines, len(r.Caches))
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"capacity (entries), log scale", "hit ratio (%)", HoldfastName, "lru", BeladyName, "100", "400"} {
		if !strings.Contains(all, want) {
			t.Errorf("chart text lacks %q: %s", want, all)
		}
	}
	if err := r.Chart(&b, "nope"); err == nil {
		t.Error("a chart of a workload with no rows: no error")
	}
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	paths, err := sampleResult().WriteCharts(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "zipf-0.9.svg"), filepath.Join(dir, "trace_oltp.svg")}
	if strings.Join(paths, ",") != strings.Join(want, ",") {
		t.Fatalf("wrote %v, want %v", paths, want)
	}
	for _, p := range paths {
		if b, err := os.ReadFile(p); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
			t.Errorf("%s: %v, starts %q", p, err, b[:min(len(b), 10)])
		}
	}
}
