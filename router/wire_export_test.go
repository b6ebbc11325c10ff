package router

import (
	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
)

// decodeFast is the fast path of decodeRequest, for FuzzDecodeFast.
func decodeFast(data []byte, req *request) bool { return wire.DecodeFast(data, req) }

// appendRecordBody is wire.AppendRecordBody, for BenchmarkEncodeMessage.
func appendRecordBody(dst []byte, r *engine.Record) []byte { return wire.AppendRecordBody(dst, r) }
