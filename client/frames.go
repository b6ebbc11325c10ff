package client

import (
	"encoding/json"
	"time"
)

// inFrame is any frame the gateway sends; fields are filled by op.
type inFrame struct {
	Op string          `json:"op"`
	ID json.RawMessage `json:"id"`
	// welcome
	Session string  `json:"session"`
	Epoch   string  `json:"epoch"`
	Limits  *Limits `json:"limits"`
	// message, gap, published, subscribed, topic_deleted
	Pattern   string            `json:"pattern"`
	Group     string            `json:"group"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Headers   map[string]string `json:"headers"`
	Data      json.RawMessage   `json:"data"`
	Encoding  string            `json:"encoding"`
	Delta     bool              `json:"delta"` // data is a delta (delta.go)
	Time      time.Time         `json:"time"`
	Attempt   int               `json:"attempt"`
	Duplicate bool              `json:"duplicate"`
	Recovered *bool             `json:"recovered"`
	From      int64             `json:"from"`
	To        int64             `json:"to"`
	Reason    string            `json:"reason"`
	// refreshed, refresh_required
	Expires string `json:"expires"`
	// join, leave, presence
	User    string          `json:"user"`
	Info    json.RawMessage `json:"info"`
	Count   int             `json:"count"`
	Members []Member        `json:"members"`
	// error
	Code    string `json:"code"`
	Message string `json:"message"`
}

// message is the delivery a message frame carries (without its
// subscription).
func (f *inFrame) message() *Message {
	return &Message{
		Pattern: f.Pattern, Topic: f.Topic, Partition: f.Partition, Offset: f.Offset,
		Key: f.Key, Headers: f.Headers, Data: f.Data, Encoding: f.Encoding, Time: f.Time,
		Group: f.Group, Attempt: f.Attempt,
	}
}

// gap is the gap a gap frame reports.
func (f *inFrame) gap() *Gap {
	return &Gap{
		Pattern: f.Pattern, Group: f.Group, Topic: f.Topic, Partition: f.Partition,
		From: f.From, To: f.To, Reason: f.Reason,
	}
}

// published is the result a published frame reports.
func (f *inFrame) published() PublishResult {
	return PublishResult{Topic: f.Topic, Partition: f.Partition, Offset: f.Offset, Duplicate: f.Duplicate}
}

// err is the error an error frame reports.
func (f *inFrame) err() *Error { return &Error{Code: f.Code, Message: f.Message} }

// Welcome is the gateway's first frame on a connection.
type Welcome struct {
	Session string
	Epoch   string
	Limits  Limits
}

// Limits are the gateway's limits for a session, from the welcome frame.
// Fields the gateway did not send are zero.
type Limits struct {
	MaxFrameBytes    int     `json:"max_frame_bytes"`
	MaxMessageBytes  int     `json:"max_message_bytes"`
	MaxSubscriptions int     `json:"max_subscriptions"`
	QueueMessages    int     `json:"queue_messages"`
	PublishRate      float64 `json:"publish_rate"`
}

type subscribeReq struct {
	Op       string      `json:"op"`
	ID       uint64      `json:"id"`
	Pattern  string      `json:"pattern"`
	Group    string      `json:"group,omitempty"`
	From     *From       `json:"from,omitempty"`
	OnFull   OnFull      `json:"on_full,omitempty"`
	Filter   *filterSpec `json:"filter,omitempty"`
	Presence bool        `json:"presence,omitempty"`
	Delta    string      `json:"delta,omitempty"`
}

type filterSpec struct {
	Headers map[string]string `json:"headers"`
}

type unsubscribeReq struct {
	Op      string `json:"op"`
	ID      uint64 `json:"id"`
	Pattern string `json:"pattern"`
	Group   string `json:"group,omitempty"`
}

type publishReq struct {
	Op       string            `json:"op"`
	ID       uint64            `json:"id"`
	Topic    string            `json:"topic"`
	Data     json.RawMessage   `json:"data"`
	Encoding string            `json:"encoding,omitempty"`
	Key      string            `json:"key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	MsgID    string            `json:"msg_id,omitempty"`
	Priority *int              `json:"priority,omitempty"`
}

// ackReq is an ack or a nack; ID 0 asks for no reply.
type ackReq struct {
	Op        string `json:"op"`
	ID        uint64 `json:"id,omitempty"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Error     string `json:"error,omitempty"`
}

// PublishResult is where a published record was stored.
type PublishResult struct {
	Topic     string
	Partition int
	Offset    int64
	// Duplicate is true when the record repeated a msg_id within the
	// dedupe window; Partition and Offset are then the first record's.
	Duplicate bool
}

// Gap reports offsets [From, To) of a partition that a subscription did not
// receive.
type Gap struct {
	Pattern   string
	Group     string
	Topic     string
	Partition int
	From      int64
	To        int64
	// Reason is "queue_full" (the gateway's queue for this session was
	// full), "retention" (the log trimmed them first) or
	// "client_queue_full" (the subscription's MaxPending was reached in
	// this client).
	Reason string
}

// Reset reports that a subscription could not be continued where it left
// off after a reconnect; delivery restarted at the earliest retained record.
type Reset struct {
	Pattern string
	Group   string
	// EpochChanged is true when the gateway's log has another epoch than
	// the positions the client held, so offsets started over.
	EpochChanged bool
}

// TopicDeleted reports that a topic a subscription read was deleted
// (Options.OnTopicDeleted).
type TopicDeleted struct {
	Pattern string // the subscription's pattern
	Topic   string // the deleted topic
}
