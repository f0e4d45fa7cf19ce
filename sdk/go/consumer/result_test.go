package consumer

import (
	"testing"
	"time"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

func TestResultsOnTheWire(t *testing.T) {
	tests := []struct {
		name    string
		result  Result
		verdict sidingv1.Verdict
		reason  string
		after   *float64
	}{
		{"ack", Ack(), sidingv1.Verdict_VERDICT_ACK, "", nil},
		{"retry after", Retry(1500*time.Millisecond, "later"), sidingv1.Verdict_VERDICT_RETRY, "later", ptr(1.5)},
		{"retry, the lane's delay", Retry(0, "later"), sidingv1.Verdict_VERDICT_RETRY, "later", nil},
		{"dead", Dead("poison"), sidingv1.Verdict_VERDICT_DEAD, "poison", nil},
		{"backoff on a stream", Backoff(2*time.Second, ""), sidingv1.Verdict_VERDICT_RETRY, "consumer asked to back off", ptr(2.0)},
		{"the zero result never acks", Result{}, sidingv1.Verdict_VERDICT_RETRY, "handler returned no result", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.result.toProto("t/0/1")
			if m.GetDeliveryId() != "t/0/1" || m.GetVerdict() != tt.verdict || m.GetReason() != tt.reason {
				t.Errorf("got %v", m)
			}
			if (m.RetryAfterSeconds == nil) != (tt.after == nil) || (tt.after != nil && *m.RetryAfterSeconds != *tt.after) {
				t.Errorf("retry_after_seconds = %v, want %v", m.RetryAfterSeconds, tt.after)
			}
		})
	}
}

func TestOutputsTravelWithAnAck(t *testing.T) {
	m := Ack(Output{Topic: "done", Value: []byte{0, 0xff}, Headers: []Header{{"h", []byte("v")}}}).toProto("t/0/1")
	if len(m.Outputs) != 1 || m.Outputs[0].GetTopic() != "done" || m.Outputs[0].Key != nil || string(m.Outputs[0].GetValue()) != "\x00\xff" {
		t.Fatalf("outputs = %v", m.Outputs)
	}
}

func TestDeliveryKeepsAbsentAndEmptyApart(t *testing.T) {
	d := deliveryFromProto(&sidingv1.Delivery{Id: "t/0/1", Key: []byte{}, TimestampMs: 1700000000123})
	if d.Key == nil || len(d.Key) != 0 || d.Value != nil {
		t.Errorf("key %#v value %#v: want empty and absent", d.Key, d.Value)
	}
	if !d.Timestamp.Equal(time.UnixMilli(1700000000123)) {
		t.Errorf("timestamp %v", d.Timestamp)
	}
}

func ptr(f float64) *float64 { return &f }
