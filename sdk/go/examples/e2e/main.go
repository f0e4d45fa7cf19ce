// The end-to-end consumer (tests/e2e/test_sdks.py): serves gRPC and/or webhooks, answers by the
// record's key and writes one JSON line per delivery to --record (with the call it came by:
// DeliverStream, DeliverBatches, webhook, webhook-batch).
//
//	key "dead"  -> Dead("dead on purpose")
//	key "retry" -> Retry on attempt 1, Ack from attempt 2
//	any other   -> Ack
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/siding-dev/siding/sdk/go/consumer"
)

type line struct {
	Transport string `json:"transport"`
	Call      string `json:"call"`
	ID        string `json:"id"`
	Key       string `json:"key"`
	Attempt   int32  `json:"attempt"`
	Lane      int32  `json:"lane"`
	ValueHex  string `json:"value_hex"`
	Verdict   string `json:"verdict"`
}

type recorder struct {
	mu  sync.Mutex
	out *os.File
}

func (r *recorder) handler(transport string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, d consumer.Delivery) consumer.Result {
		result := consumer.Ack()
		switch string(d.Key) {
		case "dead":
			result = consumer.Dead("dead on purpose")
		case "retry":
			if d.Attempt == 1 {
				result = consumer.Retry(0, "retry once")
			}
		}
		l := line{transport, consumer.Call(ctx), d.ID, string(d.Key), d.Attempt, d.Lane, hex.EncodeToString(d.Value), result.Verdict().String()}
		text, _ := json.Marshal(l)
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, err := r.out.Write(append(text, '\n')); err != nil {
			return consumer.Backoff(time.Second, "cannot record: "+err.Error())
		}
		return result
	})
}

func main() {
	grpcAddr := flag.String("grpc", "", "serve gRPC on host:port")
	httpAddr := flag.String("http", "", "serve webhooks on host:port")
	secret := flag.String("secret", "", "the webhook secret")
	record := flag.String("record", "", "append one JSON line per delivery to this file")
	flag.Parse()
	out, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	rec := &recorder{out: out}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	if *grpcAddr != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- consumer.ListenAndServe(ctx, *grpcAddr, rec.handler("grpc"), consumer.WithGracePeriod(5*time.Second))
		}()
	}
	if *httpAddr != "" {
		hook, err := consumer.NewWebhookHandler(rec.handler("http"), consumer.WithSecret(*secret))
		if err != nil {
			log.Fatal(err)
		}
		lis, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: hook, ReadHeaderTimeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs <- srv.Shutdown(shutdown)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		log.Fatal(err)
	}
}
