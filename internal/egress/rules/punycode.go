package rules

import (
	"errors"
	"math"
	"strings"
	"unicode/utf8"
)

// Punycode (RFC 3492) parameters.
const (
	punyBase        = 36
	punyTMin        = 1
	punyTMax        = 26
	punySkew        = 38
	punyDamp        = 700
	punyInitialBias = 72
	punyInitialN    = 128
)

var errPunyOverflow = errors.New("punycode overflow")

// punyEncode returns the punycode of a label, without the "xn--" prefix.
func punyEncode(label []rune) (string, error) {
	var out strings.Builder
	for _, r := range label {
		if r < utf8.RuneSelf {
			out.WriteByte(byte(r))
		}
	}
	basic := out.Len()
	if basic > 0 {
		out.WriteByte('-')
	}
	n, delta, bias := rune(punyInitialN), 0, punyInitialBias
	for h := basic; h < len(label); {
		m := rune(math.MaxInt32)
		for _, r := range label {
			if r >= n && r < m {
				m = r
			}
		}
		if int(m-n) > (math.MaxInt32-delta)/(h+1) {
			return "", errPunyOverflow
		}
		delta += int(m-n) * (h + 1)
		n = m
		for _, r := range label {
			if r < n {
				if delta++; delta > math.MaxInt32 {
					return "", errPunyOverflow
				}
			}
			if r != n {
				continue
			}
			q := delta
			for k := punyBase; ; k += punyBase {
				t := punyThreshold(k, bias)
				if q < t {
					break
				}
				out.WriteByte(punyDigit(t + (q-t)%(punyBase-t)))
				q = (q - t) / (punyBase - t)
			}
			out.WriteByte(punyDigit(q))
			bias = punyAdapt(delta, h+1, h == basic)
			delta = 0
			h++
		}
		delta++
		n++
	}
	return out.String(), nil
}

// punyDecode decodes the punycode s (without "xn--").
func punyDecode(s string) ([]rune, error) {
	var out []rune
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		for _, c := range []byte(s[:i]) {
			if c >= utf8.RuneSelf {
				return nil, errors.New("non-ASCII byte in punycode")
			}
			out = append(out, rune(c))
		}
		s = s[i+1:]
	}
	n, bias, i := punyInitialN, punyInitialBias, 0
	for len(s) > 0 {
		oldi, w := i, 1
		for k := punyBase; ; k += punyBase {
			if len(s) == 0 {
				return nil, errors.New("truncated punycode")
			}
			d, ok := punyValue(s[0])
			if !ok {
				return nil, errors.New("invalid punycode digit")
			}
			s = s[1:]
			if d > (math.MaxInt32-i)/w {
				return nil, errPunyOverflow
			}
			i += d * w
			t := punyThreshold(k, bias)
			if d < t {
				break
			}
			if w > math.MaxInt32/(punyBase-t) {
				return nil, errPunyOverflow
			}
			w *= punyBase - t
		}
		x := len(out) + 1
		bias = punyAdapt(i-oldi, x, oldi == 0)
		if i/x > utf8.MaxRune-n {
			return nil, errPunyOverflow
		}
		n += i / x
		i %= x
		if !utf8.ValidRune(rune(n)) {
			return nil, errors.New("punycode decodes to an invalid code point")
		}
		out = append(out, 0)
		copy(out[i+1:], out[i:])
		out[i] = rune(n)
		i++
	}
	return out, nil
}

func punyThreshold(k, bias int) int {
	switch t := k - bias; {
	case t < punyTMin:
		return punyTMin
	case t > punyTMax:
		return punyTMax
	default:
		return t
	}
}

func punyAdapt(delta, points int, first bool) int {
	if first {
		delta /= punyDamp
	} else {
		delta /= 2
	}
	delta += delta / points
	k := 0
	for delta > ((punyBase-punyTMin)*punyTMax)/2 {
		delta /= punyBase - punyTMin
		k += punyBase
	}
	return k + (punyBase-punyTMin+1)*delta/(delta+punySkew)
}

func punyDigit(d int) byte {
	if d < 26 {
		return byte('a' + d)
	}
	return byte('0' + d - 26)
}

func punyValue(c byte) (int, bool) {
	switch {
	case 'a' <= c && c <= 'z':
		return int(c - 'a'), true
	case 'A' <= c && c <= 'Z':
		return int(c - 'A'), true
	case '0' <= c && c <= '9':
		return int(c-'0') + 26, true
	}
	return 0, false
}
