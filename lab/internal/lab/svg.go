package lab

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// SVG draws the scenario's chart by hand (no plotting dependency): latency
// p50 (dashed) and p99 (solid) per 1-second bucket on a log scale, one colour
// per mode, the fault window shaded; loader calls per second in a panel
// beneath on a linear scale.
func SVG(w io.Writer, rep *Report) error {
	const (
		width  = 960.0
		left   = 70.0
		right  = 150.0 // legend
		top    = 40.0
		latH   = 300.0
		gap    = 50.0
		loadH  = 140.0
		bottom = 40.0
	)
	height := top + latH + gap + loadH + bottom
	plotW := width - left - right

	n := max(secondsIn(rep.Duration), 1)
	maxLat, maxLoad := 1.0, 1.0
	for _, m := range rep.Modes {
		n = max(n, len(m.Series))
		for _, s := range m.Series {
			maxLat = max(maxLat, s.P99)
			maxLoad = max(maxLoad, float64(s.LoaderCalls))
		}
	}
	x := func(sec float64) float64 { return left + sec/float64(n)*plotW }
	// Log scale from 0.1 ms to the next power of ten above the largest p99.
	lo, hi := -1.0, math.Ceil(math.Log10(maxLat))
	yLat := func(ms float64) float64 {
		v := math.Log10(max(ms, 0.1))
		return top + latH - (v-lo)/(hi-lo)*latH
	}
	loadTop := top + latH + gap
	maxLoad = niceCeil(maxLoad)
	yLoad := func(c float64) float64 { return loadTop + loadH - c/maxLoad*loadH }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(&b, left, 20, "start", "font-size=\"14\" font-weight=\"bold\"", rep.Scenario+": latency per 1 s bucket (p99 solid, p50 dashed), log scale")

	// Fault window, shaded across both panels.
	if rep.Window[1] > rep.Window[0] {
		x0, x1 := x(rep.Window[0].Seconds()), x(rep.Window[1].Seconds())
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#f4c7c3" fill-opacity="0.5"/>`+"\n", x0, top, x1-x0, latH)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#f4c7c3" fill-opacity="0.5"/>`+"\n", x0, loadTop, x1-x0, loadH)
		text(&b, (x0+x1)/2, top+12, "middle", `fill="#a33"`, "fault window")
	}

	// Events: a dashed line across both panels, labelled at the top.
	for _, mk := range rep.Marks {
		xm := x(mk.At.Seconds())
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#a33" stroke-dasharray="2,3"/>`+"\n", xm, top, xm, loadTop+loadH)
		text(&b, xm+3, top+24, "start", `fill="#a33"`, mk.Label)
	}

	// Latency grid: one line per decade.
	for e := lo; e <= hi; e++ {
		y := yLat(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+plotW, y)
		text(&b, left-6, y+4, "end", "", fmt.Sprintf("%g ms", math.Pow(10, e)))
	}
	// Loader grid: quarters.
	for i := 0; i <= 4; i++ {
		c := maxLoad * float64(i) / 4
		y := yLoad(c)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+plotW, y)
		text(&b, left-6, y+4, "end", "", fmt.Sprintf("%g", c))
	}
	text(&b, left, loadTop-8, "start", `font-weight="bold"`, "loader calls per second")
	// Time axis, under each panel.
	step := max(1, n/15)
	for s := 0; s <= n; s += step {
		for _, y := range []float64{top + latH, loadTop + loadH} {
			text(&b, x(float64(s)), y+14, "middle", "", fmt.Sprintf("%ds", s))
		}
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", left, top, plotW, latH)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", left, loadTop, plotW, loadH)

	for i, m := range rep.Modes {
		col := modeColour(m.Mode, i)
		var p50, p99, load []string
		for sec, s := range m.Series {
			cx := x(float64(sec) + 0.5)
			if s.Requests > 0 {
				p50 = append(p50, fmt.Sprintf("%.1f,%.1f", cx, yLat(s.P50)))
				p99 = append(p99, fmt.Sprintf("%.1f,%.1f", cx, yLat(s.P99)))
			}
			load = append(load, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(float64(sec)), yLoad(float64(s.LoaderCalls)), x(float64(sec+1)), yLoad(float64(s.LoaderCalls))))
		}
		polyline(&b, p99, col, "")
		polyline(&b, p50, col, `stroke-dasharray="5,3"`)
		polyline(&b, load, col, "")
		ly := top + 20 + float64(i)*36
		lx := left + plotW + 12
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/>`+"\n", lx, ly, lx+24, ly, col)
		text(&b, lx+30, ly+4, "start", "", m.Mode+" p99")
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2" stroke-dasharray="5,3"/>`+"\n", lx, ly+14, lx+24, ly+14, col)
		text(&b, lx+30, ly+18, "start", "", m.Mode+" p50")
	}
	if len(rep.Modes) == 0 {
		text(&b, left+plotW/2, top+latH/2, "middle", "", "no mode ran")
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func polyline(b *bytes.Buffer, pts []string, col, extra string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8" %s points="%s"/>`+"\n", col, extra, strings.Join(pts, " "))
}

func text(b *bytes.Buffer, x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>`, x, y, anchor, attrs)
	_ = xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

func modeColour(mode string, i int) string {
	switch mode {
	case "naive":
		return "#d62728"
	case "holdfast":
		return "#1f77b4"
	}
	return []string{"#2ca02c", "#9467bd", "#8c564b"}[i%3]
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
