package session

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReadBursts: a client writes 64 small text frames at a time (a
// pipelining publisher) to a session accepted by Accept; one op is one
// frame read and handed to the handler.
func BenchmarkReadBursts(b *testing.B) {
	const perWrite = 64
	var handled atomic.Int64
	rs := rawServe(b, Options{}, handlerFunc(func(*Session, []byte) { handled.Add(1) }))
	batch := bytes.Repeat(maskedText(string(bytes.Repeat([]byte("x"), 100))), perWrite)
	b.ReportAllocs()
	b.ResetTimer()
	writes := (b.N + perWrite - 1) / perWrite
	for range writes {
		if _, err := rs.client.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for handled.Load() < int64(writes*perWrite) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d frames handled after a minute", handled.Load(), writes*perWrite)
		}
		time.Sleep(50 * time.Microsecond)
	}
}
