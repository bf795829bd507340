// Command floe is a Benthos v4 binary with the core components plus floe's
// `iceberg` output: `floe run pipeline.yaml`, `floe lint pipeline.yaml`.
package main

import (
	"context"

	_ "github.com/floe-dev/floe/go-shim/iceberg"
	_ "github.com/floe-dev/floe/go-shim/kafka"
	_ "github.com/floe-dev/floe/go-shim/prometheus"
	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func main() {
	service.RunCLI(context.Background())
}
