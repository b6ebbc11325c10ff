package wire

import (
	"testing"
	"time"
)

// appendTimeStd is AppendTime as the time package writes it: the reference
// the hand formatter must match byte for byte.
func appendTimeStd(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, TimeFormat)
	return append(dst, '"')
}

func TestAppendTimeMatchesFormat(t *testing.T) {
	east := time.FixedZone("east", 5*3600+30*60)
	cases := []time.Time{
		{},
		time.Unix(0, 0),
		time.Unix(0, 999_999_999),
		time.Date(2026, 12, 4, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6_999_999, east),
		time.Date(2024, 2, 29, 0, 0, 0, 1, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(999, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 4, 0, 0, 0, 0, east), // the day before in UTC
		time.Now(),
	}
	for _, tm := range cases {
		want := string(appendTimeStd([]byte("x"), tm))
		if got := string(AppendTime([]byte("x"), tm)); got != want {
			t.Errorf("AppendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int64(0), int32(0))
	f.Add(int64(1_764_892_800), int64(123_456_789), int32(3600))
	f.Add(int64(253_402_300_799), int64(999_999_999), int32(-7200))
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int32) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", int(offset%(18*3600))))
		want := string(appendTimeStd(nil, tm))
		if got := string(AppendTime(nil, tm)); got != want {
			t.Fatalf("AppendTime(%d, %d) = %s, want %s", sec, nsec, got, want)
		}
	})
}

func BenchmarkAppendTime(b *testing.B) {
	buf := make([]byte, 0, 64)
	tm := time.Date(2026, 12, 4, 21, 10, 11, 123_456_789, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendTime(buf[:0], tm)
	}
}
