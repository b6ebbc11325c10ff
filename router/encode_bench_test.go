package router

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// BenchmarkEncodeMessage is the per-record, per-pattern cost of fan-out
// encoding: the shared record body once, then one frame per pattern.
func BenchmarkEncodeMessage(b *testing.B) {
	rec := &engine.Record{
		Topic: "orders.created.eu", Partition: 3, Offset: 123456, Key: "customer-42",
		Headers: map[string]string{"region": "eu"},
		Data:    []byte(`{"sku":"A-1","qty":2,"price":1999}`),
		Time:    time.Date(2026, 11, 29, 8, 0, 0, 123e6, time.UTC),
	}
	b.Run("body+frame", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			body := appendRecordBody(make([]byte, 0, 192), rec)
			_ = encodeMessage("orders.*.eu", body)
		}
	})
	b.Run("frame only", func(b *testing.B) {
		body := appendRecordBody(nil, rec)
		b.ReportAllocs()
		for b.Loop() {
			_ = encodeMessage("orders.*.eu", body)
		}
	})
}
