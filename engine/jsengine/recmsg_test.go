package jsengine

import (
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// refRecHeader is the header recMsg replaces: header() and
// nats.Header.Set.
func refRecHeader(off int64, at time.Time, cum int64, kv ...string) nats.Header {
	h := header(off, at, cum)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func checkRecMsg(t testing.TB, off int64, at time.Time, cum int64, kv ...string) {
	t.Helper()
	r := newRecMsg("s.x", []byte("d"), off, at, cum)
	for i := 0; i+1 < len(kv); i += 2 {
		r.set(kv[i], kv[i+1])
	}
	want := refRecHeader(off, at, cum, kv...)
	if !reflect.DeepEqual(r.msg.Header, want) {
		t.Fatalf("newRecMsg(%d, %v, %d) + %q: header %v, want %v", off, at.UnixNano(), cum, kv, r.msg.Header, want)
	}
	if r.msg.Subject != "s.x" || string(r.msg.Data) != "d" {
		t.Fatalf("subject %q, data %q", r.msg.Subject, r.msg.Data)
	}
	// A value added later goes beside the one set, not over the next
	// slot's value.
	r.msg.Header.Add(hOff, "added")
	want.Add(hOff, "added")
	if !reflect.DeepEqual(r.msg.Header, want) {
		t.Fatalf("after Add: header %v, want %v", r.msg.Header, want)
	}
}

// TestRecMsgHeaderMatchesSet: the header a recMsg builds is header()'s
// with nats.Header.Set's values, for every count of values (past the
// slots too), numbers at their limits, and a key set twice.
func TestRecMsgHeaderMatchesSet(t *testing.T) {
	at := time.Unix(1_700_000_000, 123456789)
	checkRecMsg(t, 0, at, 0)
	checkRecMsg(t, math.MaxInt64, time.Unix(0, math.MaxInt64), math.MaxInt64)
	checkRecMsg(t, math.MinInt64, time.Unix(0, math.MinInt64), math.MinInt64)
	checkRecMsg(t, -1, time.Time{}, -1)
	var kv []string
	for i := range 2 * recHeaderSlots {
		kv = append(kv, "K"+strconv.Itoa(i), "v"+strconv.Itoa(i))
		checkRecMsg(t, 7, at, 99, kv...)
	}
	checkRecMsg(t, 1, at, 2, hMeta, `{"p":1}`, hMeta, `{"p":2}`, jetstream.MsgIDHeader, "n.1")
	checkRecMsg(t, 1, at, 2, hOff, "9") // a number replaced
}

func FuzzRecMsgHeader(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), uint64(0), "n", "")
	f.Add(int64(-5), int64(math.MinInt64), int64(math.MaxInt64), uint64(math.MaxUint64), "node-a", `{"k":"x"}`)
	f.Fuzz(func(t *testing.T, off, ns, cum int64, seq uint64, id, meta string) {
		at := time.Unix(0, ns)
		r := newRecMsg("s", nil, off, at, cum)
		r.set(hMeta, meta)
		r.set(jetstream.MsgIDHeader, id)
		r.setUint(jetstream.ExpectedLastSubjSeqHeader, seq)
		want := refRecHeader(off, at, cum, hMeta, meta, jetstream.MsgIDHeader, id, jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
		if !reflect.DeepEqual(r.msg.Header, want) {
			t.Fatalf("header %v, want %v", r.msg.Header, want)
		}
	})
}

func TestNodeMsgID(t *testing.T) {
	long := string(make([]byte, 100)) // past the stack buffer
	for _, c := range []struct {
		node, sep string
		n         uint64
	}{{"n", ".", 0}, {"abc", ".b", 42}, {"", ".", math.MaxUint64}, {long, ".", 7}} {
		if got, want := nodeMsgID(c.node, c.sep, c.n), c.node+c.sep+strconv.FormatUint(c.n, 10); got != want {
			t.Errorf("nodeMsgID(%q, %q, %d) = %q, want %q", c.node, c.sep, c.n, got, want)
		}
	}
}

// refIDOf is idOf as the inbox's map of reply subjects told it: the id
// whose base-36 form is s.
func refIDOf(s string) (uint64, bool) {
	id, err := strconv.ParseUint(s, 36, 64)
	if err != nil || strconv.FormatUint(id, 36) != s {
		return 0, false
	}
	return id, true
}

func checkIDOf(t testing.TB, s string) {
	t.Helper()
	id, ok := idOf(s)
	wid, wok := refIDOf(s)
	if id != wid || ok != wok {
		t.Fatalf("idOf(%q) = %d, %v; want %d, %v", s, id, ok, wid, wok)
	}
}

// TestIDOfMatchesFormat: a reply subject's id is read only in the form
// publish writes it (strconv.FormatUint in base 36), so one record has
// one reply subject, as when the subjects were a map's keys.
func TestIDOfMatchesFormat(t *testing.T) {
	for _, s := range []string{
		"", "0", "1", "a", "z", "10", "00", "01", "A", "-1", "+1", " 1", "1 ", "_", "a.b",
		"3w5e11264sgsf", "3w5e11264sgsg", "3w5e11264sgsf0", "zzzzzzzzzzzzz", "1y2p0ij32e8e7", "1y2p0ij32e8e8",
		"0000000000001", "é", "\xff",
	} {
		checkIDOf(t, s)
	}
	for _, n := range []uint64{0, 1, 35, 36, math.MaxUint32, math.MaxUint64} {
		if id, ok := idOf(strconv.FormatUint(n, 36)); !ok || id != n {
			t.Fatalf("idOf(FormatUint(%d)) = %d, %v", n, id, ok)
		}
	}
}

func FuzzIDOf(f *testing.F) {
	for _, s := range []string{"0", "1z", "3w5e11264sgsf", "01", "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkIDOf(t, s) })
}
