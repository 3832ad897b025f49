package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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
			// they are still in the JSON. The target figures are shown
			// even at zero (0 unready reads is the result).
			zero := !targetFigures[k]
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
	Report  *Report  // the results, when Ran
}

// headlineExtras are the scenario figures index.md repeats: the scenarios'
// target figures, and the loads that show coalescing.
var headlineExtras = []string{
	"first_ejection_ms", "last_ejection_ms", "return_to_service_ms_max", "node_reads_max_over_mean", "node_reads_max", "node_reads_mean", "healthy_keys_p99_ratio", "unready_replica_reads", "misses_during_resync", "loads_during_resync",
	"hot_tier_share", "hot_tier_keys", "hot_tier_key_share", "node_ops_max_over_mean", "violations", "cold_key_loads",
	"loads_per_burst_16_max", "loads_burst_1000", "loads_burst_16_redis_down", "loads_per_burst_max",
	"propagation_p50_ms", "propagation_p99_ms", "old_reads_past_bound", "hot_share_before_freeze", "hot_share_during_freeze", "converge_after_thaw_ms",
	// What each mode cost for its figures: CPU time per 1,000 requests.
	"cpu_ms_per_1k_client", "cpu_ms_per_1k_redis",
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
	writeHeadlines(&b, entries)
	return os.WriteFile(filepath.Join(dir, "index.md"), []byte(b.String()), 0o644)
}

// writeHeadlines adds one table of every mode's main figures: whole run
// and fault window, naive beside holdfast, so the suite reads at a glance.
func writeHeadlines(b *strings.Builder, entries []IndexEntry) {
	b.WriteString("\n## Headline figures\n\n")
	b.WriteString("Latencies in ms; \"window\" is the fault window where the scenario has one.\n\n")
	b.WriteString("| scenario | mode | requests | errors | rejected | stale | loader calls | p99 | window p50 | window p99 | window max | figures |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, e := range entries {
		if e.Report == nil {
			continue
		}
		for _, m := range e.Report.Modes {
			var figs []string
			for _, k := range headlineExtras {
				if v, ok := m.Extra[k]; ok {
					figs = append(figs, fmt.Sprintf("%s %s", k, strconv.FormatFloat(v, 'g', 4, 64)))
				}
			}
			w := m.Window
			win := func(v float64) string {
				if w.Requests == 0 {
					return "–"
				}
				return fmtMs(v)
			}
			fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
				e.Name, m.Mode, m.Requests, m.Errors, m.Rejected, m.Stale, m.LoaderCalls, fmtMs(m.P99),
				win(w.P50), win(w.P99), win(w.Max), strings.Join(figs, ", "))
		}
	}
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

// targetFigures are the extra figures the scenarios are judged by: the
// table shows them even when they are zero in every mode.
var targetFigures = map[string]bool{
	"first_ejection_ms": true, "healthy_keys_p99_ratio": true, "unready_replica_reads": true,
	"hot_tier_share": true, "hot_tier_key_share": true, "node_ops_max_over_mean": true, "violations": true,
	// replica-resync's cross-check of unready_replica_reads, from the server,
	// and what those reads cost beside the same length before the restart.
	"unready_replica_server_reads": true, "misses_during_resync": true, "misses_before_resync": true,
	"loads_during_resync": true, "loads_before_resync": true,
	// update-propagation's.
	"propagation_p50_ms": true, "propagation_p99_ms": true, "propagation_max_ms": true,
	"old_reads_past_bound": true, "old_reads_outage_bound": true, "old_reads_during_freeze": true, "errors": true, "errors_during_freeze": true,
	"hot_share_before_freeze": true, "hot_share_during_freeze": true, "converge_after_thaw_ms": true,
}
