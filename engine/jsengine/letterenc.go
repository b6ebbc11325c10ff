package jsengine

// How a dead letter is encoded in the <prefix>_dl stream.
//
// A letter is one NATS message whose body is its record's data, unchanged,
// and whose Sy-Letter header holds the rest of the letter as JSON (ID,
// reason, group or subscriber, the record's topic, partition, offset, key,
// headers, time and priority, attempts, error, time). A letter thus costs
// what its record cost the log plus a few hundred bytes, instead of the
// 4/3 of a base64 copy inside a JSON body, which did not fit NATS's max
// payload for records of about 0.77 MiB and more: such a letter could
// never be stored, its record stayed owed and held its partition back.
//
// JetStream refuses a message whose headers exceed 64 KiB, whatever the
// max payload: a Sy-Letter header past maxLetterHeader (a long nack
// reason) has the reason cut to maxLetterError bytes. When the letter
// still does not fit (a record within a few hundred bytes of the max
// payload), it is stored without the data and marked so (Sy-Letter-Data:
// log), with the reason cut if that is still needed, and without the
// record's headers too when they alone are too large: the listing and a
// redrive read the record from the log at the letter's position, and a
// letter whose record retention has trimmed since lists no data. Letters
// stored by earlier versions (a JSON body, no Sy-Letter header) are still
// read.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

const (
	hLetter     = "Sy-Letter"      // the letter but its record's data, as JSON
	hLetterData = "Sy-Letter-Data" // "log": the data is not in the letter; read it from the log
)

// letterSlack is what a NATS message costs beyond its headers' keys and
// values and its body: the header's version line and separators, with a
// margin.
const letterSlack = 64

// encodeLetter returns the message that stores dl on subject, within
// maxPayload bytes and JetStream's 64 KiB of headers when it can: with the
// nack's reason cut to maxLetterError bytes when the Sy-Letter header is
// too large, without the record's data (marked so) when the data does not
// fit beside the rest of the letter, and, when even that is too large (the
// record's own headers), without the record's headers too, which the
// listing and a redrive then read from the log with its data.
func encodeLetter(subject string, dl *engine.DeadLetter, maxPayload int64) (*nats.Msg, error) {
	meta := *dl
	meta.Record.Data = nil
	msg := nats.NewMsg(subject)
	msg.Data = dl.Record.Data
	var b []byte
	encode := func() (err error) {
		if b, err = json.Marshal(&meta); err != nil {
			return fmt.Errorf("jsengine: dead letter: %w", err)
		}
		msg.Header.Set(hLetter, string(b))
		return nil
	}
	hdr := func() int { return len(hLetter) + len(b) + len(hLetterData) + letterSlack }
	over := func() bool {
		return hdr() > maxLetterHeader || (maxPayload > 0 && int64(hdr()+len(msg.Data)) > maxPayload)
	}
	cutError := func() error {
		if len(meta.Error) <= maxLetterError {
			return nil
		}
		meta.Error = strings.ToValidUTF8(meta.Error[:maxLetterError], "")
		return encode()
	}
	if err := encode(); err != nil {
		return nil, err
	}
	if hdr() > maxLetterHeader {
		if err := cutError(); err != nil {
			return nil, err
		}
	}
	if over() {
		msg.Data = nil
		msg.Header.Set(hLetterData, "log")
	}
	if over() {
		if err := cutError(); err != nil {
			return nil, err
		}
	}
	if over() && len(meta.Record.Headers) > 0 {
		// The record's headers, which fitted the log beside its data.
		meta.Record.Headers = nil
		if err := encode(); err != nil {
			return nil, err
		}
	}
	return msg, nil
}

// maxLetterHeader bounds a letter's Sy-Letter header: JetStream refuses a
// message whose headers exceed 64 KiB, whatever its max payload.
const maxLetterHeader = 64<<10 - 1024

// maxLetterError is how much of a nack's reason a letter keeps when the
// letter would not fit NATS's max payload otherwise.
const maxLetterError = 1024

// decodeLetter reads a stored letter; inLog reports that its data is to be
// read from the log (see fillFromLog).
func decodeLetter(m *jetstream.RawStreamMsg) (dl engine.DeadLetter, inLog bool, err error) {
	meta := m.Header.Get(hLetter)
	if meta == "" { // an earlier version's letter: all of it JSON
		err = json.Unmarshal(m.Data, &dl)
		return dl, false, err
	}
	if err = json.Unmarshal([]byte(meta), &dl); err != nil {
		return dl, false, err
	}
	if m.Header.Get(hLetterData) == "log" {
		return dl, true, nil
	}
	if len(m.Data) > 0 {
		dl.Record.Data = m.Data
	}
	return dl, false, nil
}

// fillFromLog gives a letter stored without its data the data of its
// record, read from the log; it reports false when the log no longer
// holds that record (trimmed, or its topic deleted).
func (e *Engine) fillFromLog(ctx context.Context, dl *engine.DeadLetter) (bool, error) {
	r := &dl.Record
	recs, _, err := e.Read(ctx, r.Topic, r.Partition, r.Offset, 1)
	switch {
	case isGone(err):
		return false, nil
	case err != nil:
		return false, err
	case len(recs) == 0 || recs[0].Offset != r.Offset || !recs[0].Time.Equal(r.Time) || recs[0].Key != r.Key:
		return false, nil
	}
	r.Data = recs[0].Data
	if r.Headers == nil { // stored without them too (see encodeLetter)
		r.Headers = recs[0].Headers
	}
	return true, nil
}

// isGone reports whether err says a topic or partition no longer exists.
func isGone(err error) bool {
	return errors.Is(err, engine.ErrUnknownTopic) || errors.Is(err, engine.ErrUnknownPartition)
}
