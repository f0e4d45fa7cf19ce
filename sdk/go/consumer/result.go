package consumer

import (
	"time"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

// A Verdict is what a consumer decided about one delivery.
type Verdict int

const (
	// VerdictAck: done; siding will not deliver the record again (barring crash replays).
	VerdictAck Verdict = iota + 1
	// VerdictRetry: not now; siding delivers it again later, from the next retry lane.
	VerdictRetry
	// VerdictDead: never; siding moves the record to the dead-letter topic with the reason.
	VerdictDead
)

func (v Verdict) String() string {
	switch v {
	case VerdictAck:
		return "ack"
	case VerdictRetry:
		return "retry"
	case VerdictDead:
		return "dead"
	}
	return "unspecified"
}

// A Result is a handler's answer for one delivery. Build it with Ack, Retry, Dead or Backoff;
// the zero Result is a Retry (a handler bug never acks by accident).
type Result struct {
	verdict Verdict
	after   time.Duration
	reason  string
	outputs []Output
	backoff bool
}

// An Output is a record the consumer asks siding to write to Kafka before the delivery counts
// as done (consume-and-produce). Its topic must be one of the route's outputs. A nil Key or
// Value is absent.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Ack: done with this delivery; siding writes the outputs (if any) first.
func Ack(outputs ...Output) Result {
	return Result{verdict: VerdictAck, outputs: outputs}
}

// Retry: deliver it again later from the next retry lane, no earlier than after (after <= 0:
// the lane's own delay).
func Retry(after time.Duration, reason string) Result {
	return Result{verdict: VerdictRetry, after: after, reason: reason}
}

// Dead: never; the delivery goes to the dead-letter topic with the reason.
func Dead(reason string) Result {
	return Result{verdict: VerdictDead, reason: reason}
}

// Backoff: the message is fine but the consumer is not (overloaded, a dependency down): try
// again later and slow down. A unary call answers RESOURCE_EXHAUSTED and a webhook 429 with
// Retry-After (siding redelivers in place and spends no attempt); a stream or batch has no
// status per delivery, so there it is a Retry (a webhook batch where every delivery backs off
// is answered 429).
func Backoff(after time.Duration, reason string) Result {
	if reason == "" {
		reason = "consumer asked to back off"
	}
	return Result{verdict: VerdictRetry, after: after, reason: reason, backoff: true}
}

// Verdict is the result's verdict (a zero Result is a Retry).
func (r Result) Verdict() Verdict {
	if r.verdict == 0 {
		return VerdictRetry
	}
	return r.verdict
}

// After is how long to wait at least before the next attempt (0: the lane's own delay).
func (r Result) After() time.Duration { return max(r.after, 0) }

// Reason says why (Retry, Dead, Backoff).
func (r Result) Reason() string {
	if r.verdict == 0 && r.reason == "" {
		return "handler returned no result"
	}
	return r.reason
}

// IsBackoff tells a Backoff from a Retry.
func (r Result) IsBackoff() bool { return r.backoff }

// Outputs are the records to produce with an Ack.
func (r Result) Outputs() []Output { return r.outputs }

var verdictToProto = map[Verdict]sidingv1.Verdict{
	VerdictAck:   sidingv1.Verdict_VERDICT_ACK,
	VerdictRetry: sidingv1.Verdict_VERDICT_RETRY,
	VerdictDead:  sidingv1.Verdict_VERDICT_DEAD,
}

func (r Result) toProto(deliveryID string) *sidingv1.Result {
	m := &sidingv1.Result{
		DeliveryId: deliveryID,
		Verdict:    verdictToProto[r.Verdict()],
		Reason:     r.Reason(),
	}
	if r.Verdict() == VerdictRetry && r.after > 0 {
		seconds := r.after.Seconds()
		m.RetryAfterSeconds = &seconds
	}
	for _, o := range r.outputs {
		out := &sidingv1.Output{Topic: o.Topic, Key: o.Key, Value: o.Value}
		for _, h := range o.Headers {
			out.Headers = append(out.Headers, &sidingv1.Header{Key: h.Key, Value: h.Value})
		}
		m.Outputs = append(m.Outputs, out)
	}
	return m
}
