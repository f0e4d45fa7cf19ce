package consumer

import (
	"time"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

// A Delivery is one Kafka record pushed by siding. Topic, Partition and Offset name the
// original record, so ID ("topic/partition/offset") is the same on every attempt, retry lane
// and dead-letter replay: deduplicate on it.
type Delivery struct {
	ID        string
	Topic     string
	Partition int32
	Offset    int64
	// Key is nil when the record has no key (a present but empty key is a non-nil empty slice).
	Key []byte
	// Value is nil for a tombstone over gRPC; over HTTP a tombstone and an empty value are both
	// empty.
	Value []byte
	// Headers are the record's Kafka headers, in order; names may repeat.
	Headers []Header
	// Timestamp is the record's timestamp (the zero time when it has none).
	Timestamp time.Time
	// Attempt counts from 1; Lane is 0 for the main lane and k for retry lane k.
	Attempt int32
	Lane    int32
}

// A Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

func deliveryFromProto(m *sidingv1.Delivery) Delivery {
	d := Delivery{
		ID:        m.GetId(),
		Topic:     m.GetTopic(),
		Partition: m.GetPartition(),
		Offset:    m.GetOffset(),
		Key:       present(m.Key),
		Value:     present(m.Value),
		Attempt:   m.GetAttempt(),
		Lane:      m.GetLane(),
		Timestamp: fromMillis(m.GetTimestampMs()),
	}
	for _, h := range m.GetHeaders() {
		d.Headers = append(d.Headers, Header{Key: h.GetKey(), Value: h.GetValue()})
	}
	return d
}

// present keeps an optional field's presence: set but empty stays a non-nil empty slice.
func present(b []byte) []byte {
	if b != nil && len(b) == 0 {
		return []byte{}
	}
	return b
}

func fromMillis(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
