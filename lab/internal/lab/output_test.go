package lab

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	series := []Second{
		{Requests: 200, P50: 1, P95: 2, P99: 3, Max: 4, LoaderCalls: 20},
		{Requests: 200, P50: 200, P95: 210, P99: 220, Max: 230, LoaderCalls: 180},
		{Requests: 0},
	}
	return &Report{
		Scenario: "redis-freeze",
		Params:   map[string]any{"rate_per_s": 200.0, "fault": "SIGSTOP <redis> & co"},
		Modes: []ModeResult{
			{
				Mode:   "naive",
				Stats:  Stats{Requests: 400, Errors: 1, Rejected: 2, Stale: 0, LoaderCalls: 200, P50: 1.5, P95: 210, P99: 220, Max: 230},
				Window: Stats{Requests: 200, LoaderCalls: 180, P50: 200, P95: 210, P99: 220, Max: 230},
				Nodes:  []Node{{Addr: "127.0.0.1:1234", Role: "primary", Ops: 800}},
				Extra:  map[string]float64{"hits": 100},
				Series: series,
			},
			{
				Mode:   "holdfast",
				Stats:  Stats{Requests: 400, Stale: 5, LoaderCalls: 20, P50: 0.5, P95: 1, P99: 2, Max: 40},
				Nodes:  []Node{{Addr: "127.0.0.1:1234", Role: "primary", Ops: 100}},
				Extra:  map[string]float64{},
				Series: series,
			},
		},
		Summary:  "a <summary> & more",
		Duration: 3 * time.Second,
		Window:   [2]time.Duration{time.Second, 2 * time.Second},
	}
}

func sortedKeys(m map[string]any) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// The JSON is the lab's output schema, exactly, and reads back unchanged.
func TestReportJSONSchema(t *testing.T) {
	rep := sampleReport()
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(raw), []string{"modes", "params", "scenario"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("top-level keys %v, want %v", got, want)
	}
	statKeys := []string{"errors", "loader_calls", "max_ms", "p50_ms", "p95_ms", "p99_ms", "rejected", "requests", "stale"}
	mode := raw["modes"].([]any)[0].(map[string]any)
	want := append([]string{"extra", "mode", "nodes", "window"}, statKeys...)
	sort.Strings(want)
	if got := sortedKeys(mode); !reflect.DeepEqual(got, want) {
		t.Fatalf("mode keys %v, want %v", got, want)
	}
	if got := sortedKeys(mode["window"].(map[string]any)); !reflect.DeepEqual(got, statKeys) {
		t.Fatalf("window keys %v, want %v", got, statKeys)
	}
	if got := sortedKeys(mode["nodes"].([]any)[0].(map[string]any)); !reflect.DeepEqual(got, []string{"addr", "ops", "role"}) {
		t.Fatalf("node keys %v", got)
	}

	back, err := ReadReport(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	// Only the JSON part round-trips; the chart's series and the labels do not.
	wantRep := sampleReport()
	for i := range wantRep.Modes {
		wantRep.Modes[i].Series = nil
	}
	wantRep.Summary, wantRep.Duration, wantRep.Window = "", 0, [2]time.Duration{}
	if !reflect.DeepEqual(back, wantRep) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, wantRep)
	}
}

func wellFormed(t *testing.T, r io.Reader) {
	t.Helper()
	dec := xml.NewDecoder(r)
	dec.Strict = true
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
}

func TestSVGWellFormed(t *testing.T) {
	var b bytes.Buffer
	if err := SVG(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.Contains(s, "fault window") || strings.Count(s, "<polyline") != 6 {
		t.Errorf("chart lacks the window or a mode's lines:\n%s", s)
	}
	wellFormed(t, &b)

	// No mode at all still draws a valid chart.
	b.Reset()
	if err := SVG(&b, &Report{Scenario: "x"}); err != nil {
		t.Fatal(err)
	}
	wellFormed(t, &b)
}

func TestWriteAndIndex(t *testing.T) {
	dir := t.TempDir()
	md, err := Write(dir, sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| | naive | holdfast |", "| window 1–2 s: p99 ms | 220 | 0.00 |", "| hits | 100 | – |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	for _, ext := range []string{".json", ".md", ".svg"} {
		if _, err := os.Stat(filepath.Join(dir, "redis-freeze"+ext)); err != nil {
			t.Error(err)
		}
	}
	err = WriteIndex(dir, "go run ./lab -scenario all", []IndexEntry{
		{Name: "redis-freeze", Summary: "s", Ran: true, Report: sampleReport()},
		{Name: "hot-key", Summary: "h", Missing: []string{"cluster tier"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := os.ReadFile(filepath.Join(dir, "index.md"))
	if !strings.Contains(string(idx), "[table](redis-freeze.md)") || !strings.Contains(string(idx), "missing: cluster tier") {
		t.Errorf("index:\n%s", idx)
	}
	// The headline table has a row per mode of every scenario that ran,
	// with the fault window's p99.
	for _, want := range []string{"## Headline figures", "| redis-freeze | naive |", "| redis-freeze | holdfast |", "| 220 |"} {
		if !strings.Contains(string(idx), want) {
			t.Errorf("index lacks %q:\n%s", want, idx)
		}
	}
}
