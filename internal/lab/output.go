package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Write writes DIR/NAME.json, DIR/NAME.md and DIR/NAME.svg for rep, and
// returns the markdown table so the caller can print it.
func Write(dir string, rep *Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	md := Markdown(rep)
	var svg strings.Builder
	if err := SVG(&svg, rep); err != nil {
		return "", err
	}
	for ext, body := range map[string][]byte{".json": append(js, '\n'), ".md": []byte(md), ".svg": []byte(svg.String())} {
		if err := os.WriteFile(filepath.Join(dir, rep.Scenario+ext), body, 0o644); err != nil {
			return "", err
		}
	}
	return md, nil
}

// Markdown renders the scenario's table: one column per mode, so naive
// stands beside holdfast; the fault window's rows under the overall ones.
func Markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n%s\n\n", rep.Scenario, rep.Summary)
	if rep.Figure != "" {
		fmt.Fprintf(&b, "Figure: %s.\n\n", rep.Figure)
	}
	if len(rep.Modes) > 0 {
		b.WriteString("| |")
		for _, m := range rep.Modes {
			fmt.Fprintf(&b, " %s |", m.Mode)
		}
		b.WriteString("\n|---|")
		for range rep.Modes {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		row := func(name string, f func(m ModeResult) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, m := range rep.Modes {
				fmt.Fprintf(&b, " %s |", f(m))
			}
			b.WriteString("\n")
		}
		statRows := func(prefix string, get func(m ModeResult) Stats) {
			row(prefix+"requests", func(m ModeResult) string { return fmt.Sprint(get(m).Requests) })
			row(prefix+"errors", func(m ModeResult) string { return fmt.Sprint(get(m).Errors) })
			row(prefix+"rejected", func(m ModeResult) string { return fmt.Sprint(get(m).Rejected) })
			row(prefix+"stale", func(m ModeResult) string { return fmt.Sprint(get(m).Stale) })
			row(prefix+"loader calls", func(m ModeResult) string { return fmt.Sprint(get(m).LoaderCalls) })
			row(prefix+"p50 ms", func(m ModeResult) string { return fmtMs(get(m).P50) })
			row(prefix+"p95 ms", func(m ModeResult) string { return fmtMs(get(m).P95) })
			row(prefix+"p99 ms", func(m ModeResult) string { return fmtMs(get(m).P99) })
			row(prefix+"max ms", func(m ModeResult) string { return fmtMs(get(m).Max) })
		}
		statRows("", func(m ModeResult) Stats { return m.Stats })
		if rep.Window[1] > rep.Window[0] {
			statRows(fmt.Sprintf("window %g–%g s: ", rep.Window[0].Seconds(), rep.Window[1].Seconds()),
				func(m ModeResult) Stats { return m.Window })
		}
		keys := map[string]bool{}
		for _, m := range rep.Modes {
			for k := range m.Extra {
				keys[k] = true
			}
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			// Counters that stayed zero in every mode say nothing here;
			// they are still in the JSON.
			zero := true
			for _, m := range rep.Modes {
				zero = zero && m.Extra[k] == 0
			}
			if zero {
				continue
			}
			row(k, func(m ModeResult) string {
				if v, ok := m.Extra[k]; ok {
					if v == math.Trunc(v) {
						return fmt.Sprintf("%.0f", v)
					}
					return fmt.Sprintf("%.3f", v)
				}
				return "–"
			})
		}
		row("redis ops", func(m ModeResult) string {
			var ops []string
			for _, n := range m.Nodes {
				ops = append(ops, fmt.Sprint(n.Ops))
			}
			return strings.Join(ops, " / ")
		})
		b.WriteString("\n")
	}
	for _, m := range rep.Missing {
		fmt.Fprintf(&b, "Not run — %s\n\n", m)
	}
	params := make([]string, 0, len(rep.Params))
	for k, v := range rep.Params {
		params = append(params, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(params)
	fmt.Fprintf(&b, "Parameters: %s.\n", strings.Join(params, ", "))
	return b.String()
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// IndexEntry is one line of index.md.
type IndexEntry struct {
	Name    string
	Summary string
	Ran     bool     // outputs were written
	Missing []string // parts missing, if any
	Err     error    // the run failed
}

// WriteIndex writes DIR/index.md linking every scenario's outputs.
func WriteIndex(dir string, cmd string, entries []IndexEntry) error {
	var b strings.Builder
	b.WriteString("# holdfast-lab results\n\n")
	fmt.Fprintf(&b, "Regenerate with `%s`.\n\n", cmd)
	b.WriteString("| scenario | what | results | state |\n|---|---|---|---|\n")
	for _, e := range entries {
		res := "–"
		if e.Ran {
			res = fmt.Sprintf("[table](%s.md) · [chart](%s.svg) · [json](%s.json)", e.Name, e.Name, e.Name)
		}
		state := "ok"
		switch {
		case e.Err != nil:
			state = "failed: " + oneLine(e.Err.Error())
		case len(e.Missing) > 0:
			state = "missing: " + strings.Join(e.Missing, "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", e.Name, e.Summary, res, strings.ReplaceAll(state, "|", "/"))
	}
	return os.WriteFile(filepath.Join(dir, "index.md"), []byte(b.String()), 0o644)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ReadReport reads a report written by Write (the JSON part only).
func ReadReport(r io.Reader) (*Report, error) {
	var rep Report
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
