package hitratio

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes the hit ratios as a table, a row a workload and capacity
// and a column a cache (percent of requests that hit), then what each cache
// was given at each capacity.
func (r *Result) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Hit ratio (%%), %s, %d-byte keys and %d-byte values:\n\n", r.Mode, KeyBytes, r.ValueBytes)
	b.WriteString("| workload | capacity |")
	for _, c := range r.Caches {
		fmt.Fprintf(&b, " %s |", c)
	}
	b.WriteString("\n|---|--:|" + strings.Repeat("--:|", len(r.Caches)) + "\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %d |", row.Workload, row.Capacity)
		for _, c := range r.Caches {
			fmt.Fprintf(&b, " %.2f |", row.HitRatio[c])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	r.writeSizings(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) writeSizings(b *strings.Builder) {
	if r.Mode == EqualEntries {
		fmt.Fprintf(b, "Entries each cache was given: holdfast's store a budget of capacity × %d bytes (what it charges an entry of this shape), shown as the entries it held when filled with %d× as many keys:\n\n", r.EntryCost, fillFactor)
	} else {
		fmt.Fprintf(b, "Every cache was given capacity × %d bytes (what holdfast's store charges an entry of this shape): the entries that fit at the live heap an entry took it (in brackets, bytes):\n\n", r.EntryCost)
	}
	b.WriteString("| capacity | budget |")
	for _, c := range r.Caches {
		fmt.Fprintf(b, " %s |", c)
	}
	b.WriteString("\n|--:|--:|" + strings.Repeat("--:|", len(r.Caches)) + "\n")
	for _, s := range r.Sizings {
		fmt.Fprintf(b, "| %d | %s |", s.Capacity, bytesString(s.Budget))
		for _, c := range r.Caches {
			if bpe, ok := s.BytesPerEntry[c]; ok {
				fmt.Fprintf(b, " %d (%.0f) |", s.Entries[c], bpe)
			} else {
				fmt.Fprintf(b, " %d |", s.Entries[c])
			}
		}
		b.WriteString("\n")
	}
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
