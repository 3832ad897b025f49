package hitratio

import (
	"math"
	"math/rand/v2"
)

// zipf draws ranks 0..n-1 with probability proportional to 1/(rank+1)^s,
// for any s > 0. The standard library's rand.Zipf needs s > 1, and the
// usual web and database workloads sit below it (0.6 to 1.0), so this is
// rejection-inversion sampling (Hörmann and Derflinger, "Rejection-inversion
// to generate variates from monotone discrete distributions", 1996), the
// method of Apache Commons' ZipfDistribution: constant time and memory a
// draw, whatever n.
type zipf struct {
	r             *rand.Rand
	n             float64
	s             float64
	hIntegralX1   float64
	hIntegralN    float64
	acceptBelowDx float64
}

func newZipf(r *rand.Rand, s float64, n uint64) *zipf {
	z := &zipf{r: r, n: float64(n), s: s}
	z.hIntegralX1 = z.hIntegral(1.5) - 1
	z.hIntegralN = z.hIntegral(z.n + 0.5)
	z.acceptBelowDx = 2 - z.hIntegralInverse(z.hIntegral(2.5)-z.h(2))
	return z
}

// next returns a rank in [0, n): 0 is the most popular.
func (z *zipf) next() uint64 {
	// A round is rejected rarely (the method needs about one round a draw
	// on average); the bound keeps the loop finite whatever the generator
	// does, and the last candidate stands if it is reached.
	var k float64
	for range 64 {
		u := z.hIntegralN + z.r.Float64()*(z.hIntegralX1-z.hIntegralN)
		x := z.hIntegralInverse(u)
		k = math.Floor(x + 0.5)
		k = min(max(k, 1), z.n)
		if k-x <= z.acceptBelowDx || u >= z.hIntegral(k+0.5)-z.h(k) {
			break
		}
	}
	return uint64(k) - 1
}

// h is the unnormalised density 1/x^s.
func (z *zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// hIntegral is an antiderivative of h: (x^(1-s) - 1)/(1-s), or log x at s = 1.
func (z *zipf) hIntegral(x float64) float64 {
	logX := math.Log(x)
	return helper2((1-z.s)*logX) * logX
}

func (z *zipf) hIntegralInverse(x float64) float64 {
	t := max(x*(1-z.s), -1)
	return math.Exp(helper1(t) * x)
}

// helper1 is log(1+x)/x, accurate near 0.
func helper1(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x*(1.0/3-0.25*x))
}

// helper2 is (e^x - 1)/x, accurate near 0.
func helper2(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x*0.5*(1+x*(1.0/3)*(1+0.25*x))
}
