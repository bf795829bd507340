// Command floe is a Benthos v4 binary with the core components plus floe's
// `iceberg` output: `floe run pipeline.yaml`, `floe lint pipeline.yaml`.
//
// Both also check that keyed iceberg writes keep their order (see lintcheck): lint
// fails (exit 1) with a lint line, run logs a warning and goes on.
package main

import (
	"context"
	"fmt"
	"os"

	_ "github.com/floe-dev/floe/go-shim/iceberg"
	_ "github.com/floe-dev/floe/go-shim/kafka"
	"github.com/floe-dev/floe/go-shim/lintcheck"
	_ "github.com/floe-dev/floe/go-shim/prometheus"
	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func main() {
	// As service.RunCLI, plus the keyed-order check's exit code.
	var keyedOrder lintcheck.Hook
	code, err := service.RunCLIToCode(context.Background(), keyedOrder.CLIOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
	}
	if code = keyedOrder.ExitCode(code); code != 0 {
		os.Exit(code)
	}
}
