package consumer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

const secret = "whsec_c3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3M="

// seen records the deliveries a handler got, in a channel (handlers run concurrently).
func recording(h Handler) (Handler, chan Delivery) {
	seen := make(chan Delivery, 64)
	return HandlerFunc(func(ctx context.Context, d Delivery) Result {
		seen <- d
		return h.Handle(ctx, d)
	}), seen
}

func post(t *testing.T, url string, header http.Header, body []byte, sign bool) (int, http.Header, []byte) {
	t.Helper()
	return send(t, http.MethodPost, url, header, body, sign)
}

func send(t *testing.T, method, url string, header http.Header, body []byte, sign bool) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header = header.Clone()
	if sign {
		key, _ := SecretKey(secret)
		now := time.Now().Unix()
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now, 10))
		req.Header.Set("webhook-signature", Sign(key, req.Header.Get("webhook-id"), now, body))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, answer
}

func webhookServer(t *testing.T, h Handler) *httptest.Server {
	t.Helper()
	handler, err := NewWebhookHandler(h, WithSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

func TestASingleDeliveryIsReadVerifiedAndAnsweredByStatus(t *testing.T) {
	h, seen := recording(byKey)
	srv := webhookServer(t, h)
	header := http.Header{
		"Content-Type": {"application/octet-stream"}, "Ce-Id": {"orders/2/9"}, "Webhook-Id": {"orders/2/9"},
		"Siding-Key": {base64.StdEncoding.EncodeToString([]byte("dead"))}, "Siding-Topic": {"orders"},
		"Siding-Partition": {"2"}, "Siding-Offset": {"9"}, "Siding-Attempt": {"3"}, "Siding-Lane": {"2"},
		"Ce-Time": {"2026-11-23T10:00:00.250Z"}, "Traceparent": {"00-abc"},
	}
	status, _, body := post(t, srv.URL, header, allBytes, true)
	if status != http.StatusUnprocessableEntity || string(body) != "poison" {
		t.Fatalf("got %d %q, want 422 poison", status, body)
	}
	d := <-seen
	if d.ID != "orders/2/9" || d.Partition != 2 || d.Offset != 9 || d.Attempt != 3 || d.Lane != 2 || string(d.Key) != "dead" {
		t.Errorf("delivery %+v", d)
	}
	if !bytes.Equal(d.Value, allBytes) || d.Timestamp.UnixMilli() != 1795428000250 {
		t.Errorf("value or time changed: %v", d.Timestamp)
	}
	if len(d.Headers) != 1 || d.Headers[0].Key != "traceparent" {
		t.Errorf("headers %v: want only the record's own", d.Headers)
	}
}

func TestARouteThatPutsToAPathWithTheKeyIsAnsweredToo(t *testing.T) {
	srv := webhookServer(t, byKey)
	header := http.Header{"Ce-Id": {"orders/0/1"}, "Webhook-Id": {"orders/0/1"}, "Ce-Subject": {"dead"}}
	for _, tc := range []struct {
		method string
		want   int
	}{
		{http.MethodPut, http.StatusUnprocessableEntity},
		{http.MethodPatch, http.StatusUnprocessableEntity},
		{http.MethodGet, http.StatusMethodNotAllowed},
		{http.MethodDelete, http.StatusMethodNotAllowed},
	} {
		status, _, _ := send(t, tc.method, srv.URL+"/orders/dead", header, []byte("v"), true)
		if status != tc.want {
			t.Errorf("%s: got %d, want %d", tc.method, status, tc.want)
		}
	}
}

func TestSingleAnswers(t *testing.T) {
	srv := webhookServer(t, byKey)
	tests := []struct {
		key        string
		status     int
		retryAfter string
	}{
		{"", http.StatusOK, ""},
		{"retry", http.StatusInternalServerError, ""},
		{"dead", http.StatusUnprocessableEntity, ""},
		{"backoff", http.StatusTooManyRequests, "2"},
		{"panic", http.StatusInternalServerError, ""},
		{"echo", http.StatusOK, ""}, // the outputs in a JSON body: TestAnAckCarriesItsOutputsInJSON
	}
	header := http.Header{"Ce-Id": {"t/0/1"}, "Webhook-Id": {"t/0/1"}, "Ce-Subject": {"call"}}
	if _, _, body := post(t, srv.URL, header, nil, true); string(body) != "webhook" {
		t.Errorf("Call in a single webhook: %q", body)
	}
	for _, tt := range tests {
		header := http.Header{"Ce-Id": {"t/0/1"}, "Webhook-Id": {"t/0/1"}, "Ce-Subject": {tt.key}}
		status, h, _ := post(t, srv.URL, header, []byte("v"), true)
		if status != tt.status || h.Get("Retry-After") != tt.retryAfter {
			t.Errorf("%q: %d Retry-After %q, want %d %q", tt.key, status, h.Get("Retry-After"), tt.status, tt.retryAfter)
		}
	}
}

func TestARequestThatDoesNotVerifyNeverReachesTheHandler(t *testing.T) {
	h, seen := recording(byKey)
	srv := webhookServer(t, h)
	header := http.Header{"Ce-Id": {"t/0/1"}, "Webhook-Id": {"t/0/1"}, "Webhook-Timestamp": {strconv.FormatInt(time.Now().Unix(), 10)}, "Webhook-Signature": {"v1,AAAA"}}
	status, _, body := post(t, srv.URL, header, []byte("v"), false)
	if status != http.StatusUnauthorized || !bytes.Contains(body, []byte(ErrBadSignature.Error())) {
		t.Fatalf("got %d %q", status, body)
	}
	if len(seen) != 0 {
		t.Error("the handler was called")
	}
}

// The example of docs/batch.md, a tombstone, a retry and a dead one.
const batchBody = `[
 {"specversion":"1.0","id":"orders/0/42","source":"kafka://orders","type":"dev.siding.delivery",
  "time":"2026-11-23T10:00:00.000Z","subject":"customer-7","datacontenttype":"application/octet-stream",
  "data_base64":"AAEC/w==","sidingkey":"Y3VzdG9tZXItNw==","sidingattempt":1,"sidinglane":0,
  "sidingtopic":"orders","sidingpartition":0,"sidingoffset":42,
  "sidingheaders":[{"key":"trace","value_base64":"YWJj"}]},
 {"specversion":"1.0","id":"orders/1/7","sidingattempt":3,"sidinglane":2,"sidingtopic":"orders",
  "sidingpartition":1,"sidingoffset":7,"sidingheaders":[]},
 {"id":"orders/1/8","sidingkey":"cmV0cnk=","sidingtopic":"orders","sidingpartition":1,"sidingoffset":8},
 {"id":"orders/1/9","sidingkey":"ZGVhZA==","sidingtopic":"orders","sidingpartition":1,"sidingoffset":9},
 {"id":"orders/1/10","sidingkey":"Y2FsbA==","sidingtopic":"orders","sidingpartition":1,"sidingoffset":10}
]`

func TestABatchIsReadAndAnsweredPerDelivery(t *testing.T) {
	h, seen := recording(byKey)
	srv := webhookServer(t, h)
	header := http.Header{"Content-Type": {BatchContentType}, "Webhook-Id": {"batch:orders/0/42:5"}}
	status, _, body := post(t, srv.URL, header, []byte(batchBody), true)
	if status != http.StatusOK {
		t.Fatalf("status %d %s", status, body)
	}
	var answer struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"id": "orders/0/42", "verdict": "ack"},
		{"id": "orders/1/7", "verdict": "ack"},
		{"id": "orders/1/8", "verdict": "retry", "after": 1.5, "reason": "later"},
		{"id": "orders/1/9", "verdict": "dead", "reason": "poison"},
		{"id": "orders/1/10", "verdict": "dead", "reason": "webhook-batch"},
	}
	got, _ := json.Marshal(answer.Results)
	expected, _ := json.Marshal(want)
	if !bytes.Equal(got, expected) {
		t.Errorf("results %s, want %s", got, expected)
	}
	byID := map[string]Delivery{}
	for range 5 {
		d := <-seen
		byID[d.ID] = d
	}
	first, tombstone := byID["orders/0/42"], byID["orders/1/7"]
	if !bytes.Equal(first.Value, []byte{0, 1, 2, 0xff}) || string(first.Key) != "customer-7" || string(first.Headers[0].Value) != "abc" {
		t.Errorf("first %+v", first)
	}
	if tombstone.Key != nil || tombstone.Value != nil || tombstone.Attempt != 3 || tombstone.Lane != 2 || !tombstone.Timestamp.IsZero() {
		t.Errorf("tombstone %+v", tombstone)
	}
}

func TestABatchWhereEveryDeliveryBacksOffIsAnswered429(t *testing.T) {
	srv := webhookServer(t, byKey)
	body := []byte(`[{"id":"t/0/1","sidingkey":"YmFja29mZg=="},{"id":"t/0/2","sidingkey":"YmFja29mZg=="}]`)
	header := http.Header{"Content-Type": {BatchContentType}, "Webhook-Id": {"batch:t/0/1:2"}}
	status, h, _ := post(t, srv.URL, header, body, true)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") != "2" {
		t.Errorf("got %d Retry-After %q", status, h.Get("Retry-After"))
	}
}

func TestABadBatchIsA400NamingTheField(t *testing.T) {
	srv := webhookServer(t, byKey)
	tests := map[string]string{
		`{}`:                                  "not a JSON array",
		`[{"id":""}]`:                         "event [0].id is missing",
		`[{"id":"t/0/1","data_base64":"%%"}]`: `event "t/0/1".data_base64 is not valid base64`,
		`[{"id":"t/0/1","time":"yesterday"}]`: `event "t/0/1".time is not an RFC 3339 time`,
		`[{"id":"t/0/1","sidingoffset":"seven"}]`: "event [0]",
	}
	for body, names := range tests {
		header := http.Header{"Content-Type": {BatchContentType}, "Webhook-Id": {"b"}}
		status, _, answer := post(t, srv.URL, header, []byte(body), true)
		if status != http.StatusBadRequest || !bytes.Contains(answer, []byte(names)) {
			t.Errorf("%s: %d %q, want 400 naming %q", body, status, answer, names)
		}
	}
}

func TestAnUnusableSecretFailsAtStartup(t *testing.T) {
	if _, err := NewWebhookHandler(byKey, WithSecret("whsec_%%%")); !errors.Is(err, ErrBadSecret) {
		t.Errorf("got %v, want ErrBadSecret", err)
	}
}

func TestAnAckCarriesItsOutputsInJSON(t *testing.T) {
	a := singleAnswer(Ack(
		Output{Topic: "out", Key: []byte{}, Value: []byte{0, 255}, Headers: []Header{{Key: "h", Value: []byte{1}}}},
		Output{Topic: "out"},
	))
	want := `{"outputs":[{"headers":[{"key":"h","value_base64":"AQ=="}],"key_base64":"","topic":"out","value_base64":"AP8="},{"topic":"out"}]}`
	if a.status != http.StatusOK || !a.json || string(a.body) != want {
		t.Fatalf("answer = %d json=%v %s", a.status, a.json, a.body)
	}
	b := batchAnswer([]Delivery{{ID: "a"}, {ID: "b"}}, []Result{Ack(Output{Topic: "out"}), Ack()})
	if want := `{"results":[{"id":"a","verdict":"ack","outputs":[{"topic":"out"}]},{"id":"b","verdict":"ack"}]}`; string(b.body) != want {
		t.Fatalf("batch answer = %s", b.body)
	}
}

func batchRequest(t *testing.T, url, accept string, body []byte) *http.Request {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", BatchContentType)
	req.Header.Set("Webhook-Id", "batch:t/0/0")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	key, _ := SecretKey(secret)
	now := time.Now().Unix()
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(now, 10))
	req.Header.Set("Webhook-Signature", Sign(key, "batch:t/0/0", now, body))
	return req
}

func TestEveryAnswerOfTheHandlerSaysItReadsBatches(t *testing.T) {
	// siding sends an HTTP route without a batch key its deliveries in batches only once the
	// consumer says it reads them.
	srv := webhookServer(t, byKey)
	single := http.Header{"Ce-Id": {"t/0/1"}, "Webhook-Id": {"t/0/1"}, "Ce-Subject": {"dead"}}
	status, h, _ := post(t, srv.URL, single, []byte("v"), true)
	if status != http.StatusUnprocessableEntity || h.Get("Siding-Batch") != "v1" {
		t.Errorf("single: %d Siding-Batch %q, want 422 v1", status, h.Get("Siding-Batch"))
	}
	batch := http.Header{"Content-Type": {BatchContentType}, "Webhook-Id": {"batch:t/0/1:1"}}
	status, h, _ = post(t, srv.URL, batch, []byte(`[{"id":"t/0/1"}]`), true)
	if status != http.StatusOK || h.Get("Siding-Batch") != "v1" {
		t.Errorf("batch: %d Siding-Batch %q, want 200 v1", status, h.Get("Siding-Batch"))
	}
}

func TestABatchAskedAsAStreamIsAnsweredLineByLineAsEachFinishes(t *testing.T) {
	// The slow delivery finishes last, whatever its place: it waits until the test has read
	// every other line, so a server that held the lines back would never answer (siding
	// settles each delivery as its line comes).
	release := make(chan struct{})
	srv := webhookServer(t, HandlerFunc(func(ctx context.Context, d Delivery) Result {
		if string(d.Key) == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return Ack()
		}
		return byKey(ctx, d)
	}))
	body := []byte(`[{"id":"t/0/0","sidingkey":"c2xvdw=="},{"id":"t/0/1"},` +
		`{"id":"t/0/2","sidingkey":"ZGVhZA=="},{"id":"t/0/3","sidingkey":"cGFuaWM="}]`)
	client := &http.Client{Timeout: 20 * time.Second} // a server that buffers fails, not hangs
	resp, err := client.Do(batchRequest(t, srv.URL, "application/x-ndjson, application/json", body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" || resp.Header.Get("Siding-Batch") != "v1" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	lines := bufio.NewReader(resp.Body)
	got := map[string]string{}
	for n := range 4 {
		if n == 3 {
			close(release) // only once the fast ones' lines were read
		}
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("line %d: %v (read so far %v)", n, err, got)
		}
		var item map[string]any
		if err := json.Unmarshal(line, &item); err != nil {
			t.Fatalf("line %d %q: %v", n, line, err)
		}
		id := item["id"].(string)
		if _, twice := got[id]; twice || (n == 3) != (id == "t/0/0") {
			t.Fatalf("line %d is %s's (the slow one, t/0/0, comes last and once)", n, id)
		}
		got[id] = string(bytes.TrimSpace(line))
	}
	want := map[string]string{
		"t/0/0": `{"id":"t/0/0","verdict":"ack"}`,
		"t/0/1": `{"id":"t/0/1","verdict":"ack"}`,
		"t/0/2": `{"id":"t/0/2","verdict":"dead","reason":"poison"}`,
		"t/0/3": `{"id":"t/0/3","verdict":"retry","reason":"handler panicked: database is down"}`,
	}
	for id, line := range want {
		if got[id] != line {
			t.Errorf("%s: %s, want %s", id, got[id], line)
		}
	}
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Errorf("after the last line: %q %v, want the end", rest, err)
	}
}

func TestABatchNotAskedAsAStreamGetsOneJSONAnswer(t *testing.T) {
	// An older siding does not ask for the stream: it gets the one answer it reads.
	srv := webhookServer(t, byKey)
	for _, accept := range []string{"", "application/json", "application/x-ndjsonx"} {
		resp, err := http.DefaultClient.Do(batchRequest(t, srv.URL, accept, []byte(`[{"id":"t/0/1"}]`)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("Content-Type") != "application/json" || string(body) != `{"results":[{"id":"t/0/1","verdict":"ack"}]}` {
			t.Errorf("accept %q: %s %s", accept, resp.Header.Get("Content-Type"), body)
		}
	}
}

// unflushable wraps a ResponseWriter and hides its Flush, as some middleware does.
type unflushable struct{ http.ResponseWriter }

func TestAWriterThatCannotFlushGetsOneJSONAnswer(t *testing.T) {
	// Its lines would all wait for the end: the one answer says the same, and says it whole.
	handler, _ := NewWebhookHandler(byKey, WithSecret(secret))
	recorder := httptest.NewRecorder()
	handler.ServeHTTP(unflushable{recorder}, batchRequest(t, "http://consumer/", "application/x-ndjson", []byte(`[{"id":"t/0/1"}]`)))
	if recorder.Header().Get("Content-Type") != "application/json" || recorder.Body.String() != `{"results":[{"id":"t/0/1","verdict":"ack"}]}` {
		t.Errorf("answer %v %s", recorder.Header(), recorder.Body)
	}
}

func TestAcceptsResultStream(t *testing.T) {
	tests := map[string]bool{
		"":                                       false,
		"application/json":                       false,
		"application/x-ndjson":                   true,
		"application/json, Application/X-NDJSON": true,
		"application/x-ndjson;q=0.9":             true,
		"application/x-ndjsonx":                  false,
	}
	for accept, want := range tests {
		if got := acceptsResultStream(http.Header{"Accept": {accept}}); got != want {
			t.Errorf("%q: %v, want %v", accept, got, want)
		}
	}
}
