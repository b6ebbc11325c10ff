package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// From is a parsed "from": where a subscription's delivery starts.
type From struct {
	Start     engine.Start
	Positions bool // {"epoch","positions"} was given
	Epoch     string
	Pos       []engine.Position
	// Last > 0: the newest Last records of every matched partition, then
	// live ("last" is 1, {"last":N} is N).
	Last int
}

// ParseFrom parses a subscribe's "from"; absent or null is the zero From.
func ParseFrom(raw json.RawMessage) (From, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return From{}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "latest":
			return From{Start: engine.Start{Kind: engine.StartLatest}}, nil
		case "earliest":
			return From{Start: engine.Start{Kind: engine.StartEarliest}}, nil
		case "last":
			return From{Last: 1}, nil
		}
		return From{}, Errorf(CodeBadRequest, `from must be "latest", "earliest", "last", {"last":N}, {"time":...} or {"epoch":...,"positions":[...]}`)
	}
	var obj struct {
		Time      *string `json:"time"`
		Last      *int64  `json:"last"`
		Epoch     *string `json:"epoch"`
		Positions []struct {
			Topic     *string `json:"topic"`
			Partition *int    `json:"partition"`
			Offset    *int64  `json:"offset"`
		} `json:"positions"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return From{}, Errorf(CodeBadRequest, "from: %s", jsonErrText(err))
	}
	switch {
	case obj.Last != nil:
		if *obj.Last < 1 || *obj.Last > math.MaxInt32 {
			return From{}, Errorf(CodeBadRequest, "from.last must be at least 1")
		}
		return From{Last: int(*obj.Last)}, nil
	case obj.Time != nil:
		t, err := time.Parse(time.RFC3339Nano, *obj.Time)
		if err != nil {
			return From{}, Errorf(CodeBadRequest, "from.time must be RFC3339")
		}
		return From{Start: engine.Start{Kind: engine.StartTime, Time: t}}, nil
	case obj.Epoch != nil:
		f := From{Positions: true, Epoch: *obj.Epoch}
		for i, p := range obj.Positions {
			if p.Topic == nil || p.Partition == nil || p.Offset == nil {
				return From{}, Errorf(CodeBadRequest, "from.positions[%d] needs topic, partition and offset", i)
			}
			if err := trie.ValidateTopic(*p.Topic); err != nil {
				return From{}, NameError(CodeInvalidTopic, *p.Topic, err)
			}
			if *p.Partition < 0 || *p.Offset < -1 {
				return From{}, Errorf(CodeBadRequest, "from.positions[%d] is out of range", i)
			}
			f.Pos = append(f.Pos, engine.Position{Topic: *p.Topic, Partition: *p.Partition, Offset: *p.Offset})
		}
		return f, nil
	}
	return From{}, Errorf(CodeBadRequest, `from object needs "last", "time" or "epoch"`)
}

func jsonErrText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q has the wrong type", te.Field)
	}
	return "malformed"
}
