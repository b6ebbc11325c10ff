package jsengine

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// refStreamSeq is the stream sequence as nats.go reads it from a bound
// message's reply subject.
func refStreamSeq(reply string) (uint64, bool) {
	md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
	if err != nil {
		return 0, false
	}
	return md.Sequence.Stream, true
}

func checkStreamSeq(t testing.TB, reply string) {
	t.Helper()
	seq, ok := streamSeqOf(reply)
	wseq, wok := refStreamSeq(reply)
	if seq != wseq || ok != wok {
		t.Fatalf("streamSeqOf(%q) = %d, %v; nats.go gives %d, %v", reply, seq, ok, wseq, wok)
	}
}

func TestStreamSeqOfMatchesNATS(t *testing.T) {
	for _, s := range []string{
		"", "$JS.ACK", "$JS.ACK.S.C.1.2.3.4.5", "$JS.ACK.S.C.1.2.3.4.5.6", "$JS.ACK.S.C.1.2.3.4.5.6.7",
		"$JS.ACK.S.C.1.2.3.4", "$JS.ACK._.ACC.S.C.1.42.3.1700000000000000000.0.rand",
		"$JS.ACK.hub.ACC.S.C.1.42.3.4.5", "$JS.ACK.hub.ACC.S.C.1.42.3.4.5.r.extra.more",
		"$JS.ACK.S.C.1.18446744073709551615.3.4.5", "$JS.ACK.S.C.1.18446744073709551616.3.4.5",
		"$JS.ACK.S.C.1.99999999999999999999999.3.4.5", "$JS.ACK.S.C.1.-1.3.4.5", "$JS.ACK.S.C.1.+1.3.4.5",
		"$JS.ACK.S.C.1.1a.3.4.5", "$JS.ACK.S.C.1..3.4.5", "$JS.ACK.S.C.1.é.3.4.5", "$JS.ACK.S.C.1.\xff.3.4.5",
		"$JS.ACK.S.C.1.007.3.4.5", "$JS.ack.S.C.1.2.3.4.5", "$JS.ACKS.C.1.2.3.4.5.6", "X$JS.ACK.S.C.1.2.3.4.5",
		"$JS.ACK.........", "$JS.ACK..........", "$JS.ACK...........", "..........", "$JS.ACK.S.C.1.2.3.4.5.",
	} {
		checkStreamSeq(t, s)
	}
	if seq, ok := streamSeqOf("$JS.ACK.SY_rec.c.1.12345.7.1700000000000000000.3"); !ok || seq != 12345 {
		t.Fatalf("a plain reply subject: %d, %v", seq, ok)
	}
}

func FuzzStreamSeqOf(f *testing.F) {
	for _, s := range []string{"$JS.ACK.S.C.1.2.3.4.5", "$JS.ACK._.ACC.S.C.1.42.3.4.5.r", "$JS.ACK.h.A.S.C.1.42.3.4.5", "$JS.ACK.S.C.1.-1.3.4.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkStreamSeq(t, s) })
}
