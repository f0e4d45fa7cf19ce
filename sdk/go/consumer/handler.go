package consumer

import (
	"context"
	"fmt"
	"log/slog"
)

// A Handler answers one delivery. It is called concurrently, once per delivery; ctx ends when
// the call is cancelled (siding gave up, the stream broke, or the server stopped for good).
type Handler interface {
	Handle(ctx context.Context, d Delivery) Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d Delivery) Result

// Handle calls f(ctx, d).
func (f HandlerFunc) Handle(ctx context.Context, d Delivery) Result { return f(ctx, d) }

// call runs the handler; a panic is a Retry with the panic as its reason (the message may be
// fine; a consumer bug must not dead-letter it, nor crash the server).
func call(ctx context.Context, h Handler, d Delivery, log *slog.Logger) (r Result) {
	defer func() {
		if p := recover(); p != nil {
			log.Warn("handler panicked", "delivery", d.ID, "panic", p)
			r = Retry(0, fmt.Sprintf("handler panicked: %v", p))
		}
	}()
	return h.Handle(ctx, d)
}

type callKey struct{}

// Call tells how the delivery a handler is given arrived: "Deliver", "DeliverStream",
// "DeliverBatches", "webhook" or "webhook-batch" ("" outside a handler); for metrics and logs.
func Call(ctx context.Context) string {
	name, _ := ctx.Value(callKey{}).(string)
	return name
}

func withCall(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callKey{}, name)
}
