package consumer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BatchContentType marks a webhook request carrying a batch (docs/batch.md).
const BatchContentType = "application/cloudevents-batch+json"

const defaultContentType = "application/octet-stream"

// ErrEnvelope: a webhook request is not a delivery siding sends (the error names the field).
var ErrEnvelope = errors.New("not a siding delivery")

// event is one structured CloudEvent of a batch; absent fields stay nil.
type event struct {
	ID        string        `json:"id"`
	Time      *string       `json:"time"`
	Data      *string       `json:"data_base64"`
	Key       *string       `json:"sidingkey"`
	Attempt   *int32        `json:"sidingattempt"`
	Lane      *int32        `json:"sidinglane"`
	Topic     string        `json:"sidingtopic"`
	Partition int32         `json:"sidingpartition"`
	Offset    int64         `json:"sidingoffset"`
	Headers   []eventHeader `json:"sidingheaders"`
}

type eventHeader struct {
	Key   string `json:"key"`
	Value string `json:"value_base64"`
}

func isBatch(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(media), BatchContentType)
}

// deliveriesFromBatch reads every delivery of a batch request, in order.
func deliveriesFromBatch(body []byte) ([]Delivery, error) {
	var events []json.RawMessage
	if err := json.Unmarshal(body, &events); err != nil {
		return nil, fmt.Errorf("%w: the batch is not a JSON array of events: %v", ErrEnvelope, err)
	}
	out := make([]Delivery, 0, len(events))
	for i, raw := range events {
		var e event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%w: event [%d]: %v", ErrEnvelope, i, err)
		}
		if e.ID == "" {
			return nil, fmt.Errorf("%w: event [%d].id is missing", ErrEnvelope, i)
		}
		d, err := e.delivery()
		if err != nil {
			return nil, fmt.Errorf("%w: event %q.%v", ErrEnvelope, e.ID, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func (e event) delivery() (Delivery, error) {
	d := Delivery{ID: e.ID, Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, Attempt: 1}
	var err error
	if d.Key, err = optionalBase64(e.Key, "sidingkey"); err != nil {
		return d, err
	}
	if d.Value, err = optionalBase64(e.Data, "data_base64"); err != nil {
		return d, err
	}
	if e.Attempt != nil {
		d.Attempt = *e.Attempt
	}
	if e.Lane != nil {
		d.Lane = *e.Lane
	}
	if e.Time != nil {
		if d.Timestamp, err = time.Parse(time.RFC3339Nano, *e.Time); err != nil {
			return d, fmt.Errorf("time is not an RFC 3339 time: %q", *e.Time)
		}
		d.Timestamp = d.Timestamp.UTC()
	}
	for _, h := range e.Headers {
		value, err := base64.StdEncoding.DecodeString(h.Value)
		if err != nil {
			return d, fmt.Errorf("sidingheaders[%q].value_base64 is not valid base64", h.Key)
		}
		d.Headers = append(d.Headers, Header{Key: h.Key, Value: value})
	}
	return d, nil
}

func optionalBase64(s *string, field string) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		return nil, fmt.Errorf("%s is not valid base64", field)
	}
	return present(b), nil
}

// siding's own facts and HTTP's: not the record's Kafka headers.
var httpOwn = map[string]bool{
	"Host": true, "User-Agent": true, "Accept": true, "Accept-Encoding": true,
	"Content-Length": true, "Content-Type": true, "Connection": true,
	"Authorization": true, "Transfer-Encoding": true,
}

// deliveryFromRequest reads a binary-mode request: the body is the value, the rest headers.
func deliveryFromRequest(h http.Header, body []byte) (Delivery, error) {
	d := Delivery{ID: h.Get("ce-id"), Topic: h.Get("siding-topic"), Value: body, Attempt: 1}
	if d.ID == "" {
		d.ID = h.Get("webhook-id")
	}
	if d.ID == "" {
		return d, fmt.Errorf("%w: missing header ce-id", ErrEnvelope)
	}
	if d.Value == nil {
		d.Value = []byte{}
	}
	ints := []struct {
		name string
		set  func(int64)
	}{
		{"siding-partition", func(v int64) { d.Partition = int32(v) }},
		{"siding-offset", func(v int64) { d.Offset = v }},
		{"siding-attempt", func(v int64) { d.Attempt = int32(v) }},
		{"siding-lane", func(v int64) { d.Lane = int32(v) }},
	}
	for _, field := range ints {
		if text := h.Get(field.name); text != "" {
			v, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return d, fmt.Errorf("%w: %s is not an integer: %q", ErrEnvelope, field.name, text)
			}
			field.set(v)
		}
	}
	if key, ok := h["Siding-Key"]; ok {
		b, err := base64.StdEncoding.DecodeString(strings.Join(key, ""))
		if err != nil {
			return d, fmt.Errorf("%w: siding-key is not valid base64", ErrEnvelope)
		}
		d.Key = present(b)
	} else if subject, ok := h["Ce-Subject"]; ok {
		d.Key = []byte(strings.Join(subject, ""))
	}
	if t := h.Get("ce-time"); t != "" {
		ts, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return d, fmt.Errorf("%w: ce-time is not an RFC 3339 time: %q", ErrEnvelope, t)
		}
		d.Timestamp = ts.UTC()
	}
	for name, values := range h {
		lower := strings.ToLower(name)
		if httpOwn[name] || strings.HasPrefix(lower, "ce-") || strings.HasPrefix(lower, "webhook-") || strings.HasPrefix(lower, "siding-") {
			continue
		}
		for _, v := range values {
			d.Headers = append(d.Headers, Header{Key: lower, Value: []byte(v)})
		}
	}
	if ct := h.Get("Content-Type"); ct != "" && ct != defaultContentType {
		d.Headers = append(d.Headers, Header{Key: "content-type", Value: []byte(ct)})
	}
	return d, nil
}

// An httpAnswer is the response to a webhook request.
type httpAnswer struct {
	status     int
	retryAfter time.Duration // > 0: a Retry-After header
	body       []byte
	json       bool
}

// outputsJSON: outputs as a webhook answer carries them (docs/outputs.md): bytes in base64,
// a nil Key or Value left out.
func outputsJSON(outputs []Output) []map[string]any {
	list := make([]map[string]any, len(outputs))
	for i, o := range outputs {
		item := map[string]any{"topic": o.Topic}
		if o.Key != nil {
			item["key_base64"] = base64.StdEncoding.EncodeToString(o.Key)
		}
		if o.Value != nil {
			item["value_base64"] = base64.StdEncoding.EncodeToString(o.Value)
		}
		if len(o.Headers) > 0 {
			headers := make([]map[string]string, len(o.Headers))
			for n, h := range o.Headers {
				headers[n] = map[string]string{"key": h.Key, "value_base64": base64.StdEncoding.EncodeToString(h.Value)}
			}
			item["headers"] = headers
		}
		list[i] = item
	}
	return list
}

// singleAnswer: 200 acks (an ack's outputs in a JSON body), 429 (with Retry-After) backs off,
// 500 retries from the next lane (its after cannot be said), 422 dead-letters.
func singleAnswer(r Result) httpAnswer {
	switch {
	case r.Verdict() == VerdictAck && len(r.outputs) > 0:
		body, _ := json.Marshal(map[string]any{"outputs": outputsJSON(r.outputs)}) // plain values
		return httpAnswer{status: http.StatusOK, body: body, json: true}
	case r.Verdict() == VerdictAck:
		return httpAnswer{status: http.StatusOK}
	case r.IsBackoff():
		return httpAnswer{status: http.StatusTooManyRequests, retryAfter: r.After(), body: []byte(r.Reason())}
	case r.Verdict() == VerdictDead:
		return httpAnswer{status: http.StatusUnprocessableEntity, body: []byte(r.Reason())}
	}
	return httpAnswer{status: http.StatusInternalServerError, body: []byte(r.Reason())}
}

type batchResult struct {
	ID      string           `json:"id"`
	Verdict string           `json:"verdict"`
	After   *float64         `json:"after,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Outputs []map[string]any `json:"outputs,omitempty"`
}

// batchAnswer: one result per delivery; when every delivery backs off, the whole batch is
// answered 429 (siding slows down and spends no attempt).
func batchAnswer(ds []Delivery, rs []Result) httpAnswer {
	allBackoff := len(rs) > 0
	var longest time.Duration
	for _, r := range rs {
		allBackoff = allBackoff && r.IsBackoff()
		longest = max(longest, r.After())
	}
	if allBackoff {
		return httpAnswer{status: http.StatusTooManyRequests, retryAfter: longest, body: []byte("back off")}
	}
	results := make([]batchResult, len(rs))
	for i, r := range rs {
		results[i] = batchItem(ds[i].ID, r)
	}
	body, _ := json.Marshal(map[string][]batchResult{"results": results}) // plain values: cannot fail
	return httpAnswer{status: http.StatusOK, body: body, json: true}
}

// batchItem: one delivery's result as a batch answer (or a line of the stream) carries it.
func batchItem(id string, r Result) batchResult {
	item := batchResult{ID: id, Verdict: r.Verdict().String(), Reason: r.Reason()}
	if r.Verdict() == VerdictAck && len(r.outputs) > 0 {
		item.Outputs = outputsJSON(r.outputs)
	}
	if r.Verdict() == VerdictRetry && r.After() > 0 {
		after := r.After().Seconds()
		item.After = &after
	}
	return item
}

// resultStreamType: a batch's results streamed as they finish, one JSON object per line;
// siding asks for it with Accept, so a slow delivery holds back no batch-mate's answer.
const resultStreamType = "application/x-ndjson"

// readsBatches is said on every answer of the handler: this server reads the batch envelope
// and streams results when asked, so a route without a batch key sends it batches.
var readsBatches = [2]string{"Siding-Batch", "v1"}

// acceptsResultStream: whether the request's sender reads a batch's results as a stream.
func acceptsResultStream(h http.Header) bool {
	for _, value := range h.Values("Accept") {
		for _, part := range strings.Split(value, ",") {
			media, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(media), resultStreamType) {
				return true
			}
		}
	}
	return false
}

// resultLine: one delivery's result as a line of the stream.
func resultLine(id string, r Result) []byte {
	line, _ := json.Marshal(batchItem(id, r)) // plain values: cannot fail
	return append(line, '\n')
}

func (a httpAnswer) write(w http.ResponseWriter) {
	if a.json {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Header().Set(readsBatches[0], readsBatches[1])
	if a.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(a.retryAfter.Seconds())), 10))
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}
