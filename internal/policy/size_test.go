package policy

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"4096", 4096},
		{"10B", 10},
		{"1K", 1 << 10}, {"1k", 1 << 10}, {"1Ki", 1 << 10}, {"1KiB", 1 << 10}, {"1kib", 1 << 10}, {"1KB", 1000}, {"1kB", 1000},
		{"512M", 512 << 20}, {"512MiB", 512 << 20}, {"512MB", 512e6}, {"512m", 512 << 20},
		{"2G", 2 << 30}, {"2GiB", 2 << 30}, {"2GB", 2e9}, {"2Gi", 2 << 30},
		{"1T", 1 << 40}, {"1TiB", 1 << 40}, {"1TB", 1e12},
		{"1P", 1 << 50}, {"1PiB", 1 << 50}, {"1PB", 1e15},
		{"1.5G", 3 << 29}, {"0.5KiB", 512}, {"1.0001K", 1024}, {"0.1K", 102},
		{" 64 MiB ", 64 << 20},
		{"1125899906842624", 1 << 50},
	}
	for _, tt := range good {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", `invalid size "": empty`},
		{"   ", `invalid size "   ": empty`},
		{"-1", `invalid size "-1": must not be negative`},
		{"-1G", `invalid size "-1G": must not be negative`},
		{"+1G", `invalid size "+1G": want a number of bytes`},
		{"12XB", `invalid size "12XB": unknown unit "XB" (use B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB, P, PB, PiB)`},
		{"1Gb/s", `invalid size "1Gb/s": unknown unit "Gb/s"`},
		{"G", `invalid size "G": want a number of bytes`},
		{"1.", `invalid size "1.": want a number of bytes`},
		{".5G", `invalid size ".5G": want a number of bytes`},
		{"1.2.3G", `invalid size "1.2.3G": want a number of bytes`},
		{"1e9", `invalid size "1e9": unknown unit "e9"`},
		{"0x10", `invalid size "0x10": unknown unit "x10"`},
		{"1_000", `invalid size "1_000": unknown unit "_000"`},
		{"1125899906842625", `invalid size "1125899906842625": larger than the 1PiB limit`},
		{"1.0000001PiB", `invalid size "1.0000001PiB": larger than the 1PiB limit`},
		{"1025T", `invalid size "1025T": larger than the 1PiB limit`},
		{"99999999999999999999", `invalid size "99999999999999999999": larger than the 1PiB limit`},
		{strings.Repeat("1", 100), "too long"},
	}
	for _, tt := range bad {
		got, err := ParseSize(tt.in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, want error %q", tt.in, got, tt.want)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSize(%q) error %q, want %q", tt.in, err, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 1536, 512 << 20, 3 << 29, 1 << 50, 1e15, 123456789} {
		s := FormatSize(n)
		back, err := ParseSize(s)
		if err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, s, back, err)
		}
	}
	if s := FormatSize(512 << 20); s != "512MiB" {
		t.Errorf("FormatSize(512MiB) = %q", s)
	}
}
