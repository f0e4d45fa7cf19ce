// The Redpanda Connect (Benthos) peer for `make bench`: the engine with only the components the
// benchmark uses (kafka_franz in, http_client out). bench/peers/benthos_peer.py builds it into the
// ignored target/ folder and runs it with a generated config: `benthos-peer -c config.yaml`.
package main

import (
	"context"

	_ "github.com/benthosdev/benthos/v4/public/components/io"
	_ "github.com/benthosdev/benthos/v4/public/components/kafka"
	_ "github.com/benthosdev/benthos/v4/public/components/pure"
	"github.com/benthosdev/benthos/v4/public/service"
)

func main() {
	service.RunCLI(context.Background())
}
