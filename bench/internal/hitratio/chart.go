package hitratio

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// WriteCharts writes one SVG chart a workload into dir, named after the
// workload, and returns their paths.
func (r *Result) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, name := range r.workloads() {
		path := filepath.Join(dir, fileName(name)+".svg")
		f, err := os.Create(path)
		if err != nil {
			return paths, err
		}
		err = r.Chart(f, name)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("hitratio: chart %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func (r *Result) workloads() []string {
	var names []string
	for _, row := range r.Rows {
		if len(names) == 0 || names[len(names)-1] != row.Workload {
			names = append(names, row.Workload)
		}
	}
	return names
}

// fileName keeps letters, digits, '.', '-' and '_' of a workload's name.
func fileName(s string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			return c
		}
		return '_'
	}, s)
}

// The chart's frame, in SVG user units.
const (
	chartW, chartH                     = 760, 460
	plotLeft, plotRight                = 70, 600
	plotTop, plotBottom                = 50, 400
	legendX                            = 620
	holdfastStroke, stroke, dotRadius  = 3.5, 2, 3.5
	gridColour, axisColour, textColour = "#dddddd", "#333333", "#222222"
)

// palette colours the caches in order; Belady is black and dashed.
var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#ff7f0e", "#17becf", "#bcbd22", "#e377c2"}

// Chart writes an SVG line chart of workload's hit ratios against
// capacity, one line a cache, drawn with the standard library alone. The
// capacity axis is logarithmic when capacities span a factor of 4 or more
// (the usual doubling series), else linear.
func (r *Result) Chart(w io.Writer, workload string) error {
	var rows []Row
	for _, row := range r.Rows {
		if row.Workload == workload {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("no rows for workload %q", workload)
	}
	lo, hi := float64(rows[0].Capacity), float64(rows[0].Capacity)
	top := 0.0
	for _, row := range rows {
		lo, hi = min(lo, float64(row.Capacity)), max(hi, float64(row.Capacity))
		for _, v := range row.HitRatio {
			top = max(top, v)
		}
	}
	logX := hi/lo >= 4
	scale := func(v float64) float64 { return v }
	if logX {
		scale = math.Log2
	}
	x := func(c float64) float64 {
		if hi == lo {
			return (plotLeft + plotRight) / 2
		}
		return plotLeft + (scale(c)-scale(lo))/(scale(hi)-scale(lo))*(plotRight-plotLeft)
	}
	yTop := math.Min(100, math.Max(10, math.Ceil(top/10)*10))
	y := func(v float64) float64 { return plotBottom - v/yTop*(plotBottom-plotTop) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" fill="%s">%s: hit ratio by capacity (%s)</text>`+"\n", plotLeft, textColour, html.EscapeString(workload), r.Mode)
	// Horizontal grid and the hit-ratio axis: a line every tenth of yTop.
	for i := 0; i <= 10; i++ {
		v := yTop * float64(i) / 10
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, y(v), plotRight, y(v), gridColour)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%g</text>`+"\n", plotLeft-6, y(v)+4, textColour, v)
	}
	// Vertical grid and the capacity axis: a tick at each capacity run.
	for _, row := range rows {
		cx := x(float64(row.Capacity))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", cx, plotTop, cx, plotBottom, gridColour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%d</text>`+"\n", cx, plotBottom+18, textColour, row.Capacity)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom, axisColour)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom, axisColour)
	xLabel := "capacity (entries)"
	if logX {
		xLabel += ", log scale"
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", (plotLeft+plotRight)/2, plotBottom+42, textColour, xLabel)
	fmt.Fprintf(&b, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle" fill="%s">hit ratio (%%)</text>`+"\n", (plotTop+plotBottom)/2, textColour)

	for i, cache := range r.Caches {
		colour, width, dash := palette[i%len(palette)], float64(stroke), ""
		switch {
		case cache == BeladyName:
			colour, dash = "#000000", ` stroke-dasharray="6 4"`
		case cache == HoldfastName:
			width = holdfastStroke
		}
		var pts []string
		for _, row := range rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(row.Capacity)), y(row.HitRatio[cache])))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%g"%s/>`+"\n", strings.Join(pts, " "), colour, width, dash)
		for _, row := range rows {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%g" fill="%s"/>`+"\n", x(float64(row.Capacity)), y(row.HitRatio[cache]), dotRadius, colour)
		}
		ly := plotTop + 10 + 22*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%g"%s/>`+"\n", legendX, ly, legendX+28, ly, colour, width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", legendX+36, ly+4, textColour, html.EscapeString(cache))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
