package enginetest

// Dead letters of large records: a record the log accepted can always be
// dead-lettered, whatever the letter's own encoding costs.

import (
	"bytes"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// largeRecordBytes is the size of the record testLargeRecordLetter
// dead-letters: over three quarters of NATS's default max payload (1 MiB),
// where a letter that copies the data in base64 (4/3 of it) no longer fits.
const largeRecordBytes = 900 << 10

// testLargeRecordLetter: a large record that runs out of attempts becomes
// a dead letter like any other (its partition moves on), the letter lists
// its data in full, and a redrive hands the record back to its group.
func testLargeRecordLetter(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 1
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("large")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	data := make([]byte, largeRecordBytes)
	for i := range data {
		data[i] = byte(i*7 + i>>9) // every byte value, not compressible to nothing
	}
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	env.append(engine.Message{Topic: topic, Key: "k", Headers: map[string]string{"h": "v"}, Data: data})
	env.append(engine.Message{Topic: topic, Data: []byte(`"fine"`)})

	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 || !bytes.Equal(ev.d.Record.Data, data) {
		t.Fatalf("got %v, want the large record at offset 0", ev)
	}
	env.nack(ev, "too big to handle")
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 1 {
		t.Fatalf("after the last attempt got %v, want the partition to move on to offset 1", ev)
	}
	env.ack(ev)
	dls := env.waitLetters(topic, engine.DeadLetterFilter{Group: g}, 1)
	if dl := dls[0]; dl.Record.Offset != 0 || dl.Record.Key != "k" || dl.Record.Headers["h"] != "v" ||
		dl.Error != "too big to handle" || !bytes.Equal(dl.Record.Data, data) {
		t.Fatalf("dead letter of offset %d key %q error %q with %d bytes of data, want offset 0, key k, the nack's reason and the record's %d bytes",
			dl.Record.Offset, dl.Record.Key, dl.Error, len(dl.Record.Data), len(data))
	}
	waitUntil(t, env.timeout, "the group to commit past the letter", func() bool {
		return env.groupInfo(g).Partitions[0].Committed == 2
	})
	if n := env.redrive(engine.RedriveRequest{Group: g}); n != 1 {
		t.Fatalf("Redrive = %d, want 1", n)
	}
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 || ev.d.Attempt != 1 || !bytes.Equal(ev.d.Record.Data, data) {
		t.Fatalf("redriven: offset %d attempt %d with %d bytes, want offset 0 attempt 1 with the record's data",
			ev.d.Record.Offset, ev.d.Attempt, len(ev.d.Record.Data))
	}
	env.ack(ev)
}
