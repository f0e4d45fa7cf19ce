package consumer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxBodyBytes is the largest webhook body read; a larger one is answered 413.
const DefaultMaxBodyBytes = 16 << 20

// A WebhookOption configures a webhook handler.
type WebhookOption func(*webhookOptions)

type webhookOptions struct {
	secret    string
	tolerance time.Duration
	maxBody   int64
	logger    *slog.Logger
	now       func() time.Time
}

// WithSecret verifies every request's Standard Webhooks signature with the route's
// webhook_secret; a request that does not verify is answered 401 without calling the handler.
func WithSecret(secret string) WebhookOption { return func(o *webhookOptions) { o.secret = secret } }

// WithTolerance sets how far a request's timestamp may be from this clock (DefaultTolerance).
func WithTolerance(d time.Duration) WebhookOption {
	return func(o *webhookOptions) { o.tolerance = d }
}

// WithMaxBodyBytes sets the largest body read (DefaultMaxBodyBytes).
func WithMaxBodyBytes(n int64) WebhookOption { return func(o *webhookOptions) { o.maxBody = n } }

// WithWebhookLogger sets where the handler logs; slog.Default() if unset.
func WithWebhookLogger(l *slog.Logger) WebhookOption {
	return func(o *webhookOptions) { o.logger = l }
}

type webhookHandler struct {
	handler Handler
	key     []byte
	opts    webhookOptions
}

// NewWebhookHandler serves h to siding's webhooks: one delivery per request (CloudEvents binary
// mode; 200 acks, 429 backs off, 500 retries, 422 dead-letters) or a batch
// (application/cloudevents-batch+json, every delivery handled at once and answered
// {"results": [...]}; when the request's Accept names application/x-ndjson, one result per
// line instead, each written and flushed as its handler returns). Every answer of the handler
// says Siding-Batch: v1, so a route without a batch key sends batches. It fails only on an
// unusable secret.
func NewWebhookHandler(h Handler, opts ...WebhookOption) (http.Handler, error) {
	o := webhookOptions{tolerance: DefaultTolerance, maxBody: DefaultMaxBodyBytes, logger: slog.Default(), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	w := &webhookHandler{handler: h, opts: o}
	if o.secret != "" {
		key, err := SecretKey(o.secret)
		if err != nil {
			return nil, err
		}
		w.key = key
	}
	return w, nil
}

func (wh *webhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions { // siding's liveness probe
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// A route may send with POST, PUT or PATCH ([route.http] method), to any path.
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, wh.opts.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		}
		return
	}
	if body, err = DecodeBody(r.Header, body, wh.opts.maxBody); err != nil {
		var bad *BodyError
		errors.As(err, &bad)
		http.Error(w, err.Error(), bad.Status)
		return
	}
	r.Header.Del("Content-Encoding") // the handler sees the decoded body
	if wh.key != nil {
		if _, err := Verify(wh.key, r.Header, body, wh.opts.now(), wh.opts.tolerance); err != nil {
			http.Error(w, "webhook verification failed: "+err.Error(), http.StatusUnauthorized)
			return
		}
	}
	if isBatch(r.Header.Get("Content-Type")) && acceptsResultStream(r.Header) && canFlush(w) {
		ds, err := deliveriesFromBatch(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		wh.stream(withCall(r.Context(), "webhook-batch"), w, ds)
		return
	}
	answer, err := wh.respond(r.Context(), r.Header, body)
	if err != nil {
		// A request siding would never send: not a reason to dead-letter anything.
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	answer.write(w)
}

func (wh *webhookHandler) respond(ctx context.Context, h http.Header, body []byte) (httpAnswer, error) {
	if !isBatch(h.Get("Content-Type")) {
		d, err := deliveryFromRequest(h, body)
		if err != nil {
			return httpAnswer{}, err
		}
		return singleAnswer(call(withCall(ctx, "webhook"), wh.handler, d, wh.opts.logger)), nil
	}
	ds, err := deliveriesFromBatch(body)
	if err != nil {
		return httpAnswer{}, err
	}
	ctx = withCall(ctx, "webhook-batch")
	rs := make([]Result, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i] = call(ctx, wh.handler, d, wh.opts.logger)
		}()
	}
	wg.Wait()
	return batchAnswer(ds, rs), nil
}

// stream answers a batch as it finishes: one line per delivery, written and flushed when its
// handler returns, so a slow delivery holds back no other's answer. A write that fails (siding
// went away) ends the answer; ctx, the request's, then ends the handlers still running.
func (wh *webhookHandler) stream(ctx context.Context, w http.ResponseWriter, ds []Delivery) {
	type finished struct {
		id     string
		result Result
	}
	done := make(chan finished, len(ds)) // never blocks a handler, even once nobody reads
	for _, d := range ds {
		go func() { done <- finished{d.ID, call(ctx, wh.handler, d, wh.opts.logger)} }()
	}
	w.Header().Set("Content-Type", resultStreamType)
	w.Header().Set(readsBatches[0], readsBatches[1])
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	if flusher.Flush() != nil {
		return
	}
	for range ds {
		f := <-done
		if _, err := w.Write(resultLine(f.id, f.result)); err != nil {
			return
		}
		if flusher.Flush() != nil {
			return
		}
	}
}

// canFlush: whether w (or the writer it wraps) can send what was written so far; one that
// cannot would hold every line to the end, so its batches get the one JSON answer.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case http.Flusher, interface{ FlushError() error }:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}
