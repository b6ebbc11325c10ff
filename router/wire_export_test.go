package router

import "github.com/switchyard/switchyard/internal/wire"

// decodeFast is the fast path of decodeRequest, for FuzzDecodeFast.
func decodeFast(data []byte, req *request) bool { return wire.DecodeFast(data, req) }
