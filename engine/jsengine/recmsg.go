package jsengine

// A record's NATS message as the append paths build it. nats.Header.Set
// makes a slice for every value, and strconv.Format* a string for every
// number: seven or eight allocations a record on the publish path, which
// showed in a gateway's CPU profile under a publish load. recMsg holds the
// message and its header's values in one allocation, the numbers of its
// first three headers share one string, and the message ids of the chain
// are written into one string each. The header it builds is the one
// header() and nats.Header.Set build: the same keys, the same values
// (recmsg_test.go compares them).

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// recHeaderSlots is how many header values a recMsg holds without an
// allocation of their own: the three of header(), the metadata, the
// Nats-Msg-Id and the two expected-last checks, and one more (a batch's
// records carry three headers of their own: the eighth and later take
// nats.Header.Set's own slice).
const recHeaderSlots = 8

// recMsg is a record's NATS message with room for its header's values.
type recMsg struct {
	msg  nats.Msg
	vals [recHeaderSlots]string
	n    int // vals used
}

// newRecMsg returns the message storing data on subject at offset off,
// with the append time at and the partition's bytes cum: its header is
// header(off, at, cum).
func newRecMsg(subject string, data []byte, off int64, at time.Time, cum int64) *recMsg {
	r := &recMsg{}
	r.init(subject, data, off, at, cum)
	return r
}

// init makes r, which must be new, newRecMsg's message.
func (r *recMsg) init(subject string, data []byte, off int64, at time.Time, cum int64) {
	r.msg = nats.Msg{Subject: subject, Data: data, Header: make(nats.Header, recHeaderSlots)}
	var buf [3 * 20]byte // three int64s in decimal, sign included
	b := strconv.AppendInt(buf[:0], off, 10)
	i := len(b)
	b = strconv.AppendInt(b, at.UnixNano(), 10)
	j := len(b)
	b = strconv.AppendInt(b, cum, 10)
	s := string(b)
	r.set(hOff, s[:i])
	r.set(hTime, s[i:j])
	r.set(hCum, s[j:])
}

// set sets the header key to v, as nats.Header.Set does.
func (r *recMsg) set(key, v string) {
	if r.n == len(r.vals) {
		r.msg.Header.Set(key, v)
		return
	}
	r.vals[r.n] = v
	r.msg.Header[key] = r.vals[r.n : r.n+1 : r.n+1] // a later Add makes its own slice
	r.n++
}

// setUint sets the header key to v in decimal.
func (r *recMsg) setUint(key string, v uint64) {
	var buf [20]byte
	r.set(key, string(strconv.AppendUint(buf[:0], v, 10)))
}

// nodeMsgID returns node + sep + n in decimal: a Nats-Msg-Id of the
// node's chain or batches, in one allocation.
func nodeMsgID(node, sep string, n uint64) string {
	var buf [64]byte
	b := append(buf[:0], node...)
	b = append(b, sep...)
	return string(strconv.AppendUint(b, n, 10))
}
