// Command floe is a Benthos v4 binary with the core components plus floe's
// `iceberg` output: `floe run pipeline.yaml`, `floe lint pipeline.yaml`.
//
// Both also check that keyed iceberg writes keep their order (see lintcheck): lint
// fails (exit 1) with a lint line, run logs a warning and goes on. Both check every
// iceberg output section as written, whatever Benthos can decode of it: lint prints each
// problem at its field's line, run refuses to start with all of them. `floe docs` writes
// the reference pages of floe's components (see docsgen).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/floe-dev/floe/go-shim/docsgen"
	"github.com/floe-dev/floe/go-shim/iceberg"
	_ "github.com/floe-dev/floe/go-shim/kafka"
	"github.com/floe-dev/floe/go-shim/lintcheck"
	_ "github.com/floe-dev/floe/go-shim/prometheus"
	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

func main() {
	// As service.RunCLI, plus the hook's checks (keyed order, iceberg sections) and
	// their exit code.
	hook := lintcheck.Hook{Sections: icebergSection, SectionsLinted: iceberg.LeaveLintToHost}
	opts := append(hook.CLIOpts(),
		service.CLIOptSetProductName("floe"),
		service.CLIOptSetBinaryName("floe"),
		// Benthos fixes the --help tagline; the link after it is floe's docs.
		service.CLIOptSetDocumentationURL("https://github.com/floe-dev/floe/tree/main/docs"),
		service.CLIOptSetVersion(versionText(), buildDate()),
		service.CLIOptAddCommand(docsCommand()),
	)
	// `permanent_errors: stop` cancels this context: Benthos stops as on ctrl-C.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	iceberg.SetStopHost(stop)
	code, err := service.RunCLIToCode(ctx, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
	}
	if code == 0 {
		// A permanent error stopped the host, or messages were left unwritten.
		code = iceberg.ExitCode()
	}
	if code = hook.ExitCode(code); code != 0 {
		os.Exit(code)
	}
}

// icebergSection is the iceberg output's check of a section (iceberg.SectionProblems)
// for the lint hook.
func icebergSection(section *yaml.Node) []lintcheck.Problem {
	var out []lintcheck.Problem
	for _, p := range iceberg.SectionProblems(section) {
		out = append(out, lintcheck.Problem{Path: p.Path, Text: p.Text, Undecodable: p.Undecodable})
	}
	return out
}

// docsCommand is `floe docs`: the reference pages of floe's components, written into a
// folder (`--check` only reports the pages that differ, and exits 1 if any do).
func docsCommand() *cli.Command {
	return &cli.Command{
		Name:  "docs",
		Usage: "Write the reference pages of floe's components (iceberg, kafka_franz, prometheus) as markdown",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "docs/components", Usage: "folder the pages are written to"},
			&cli.BoolFlag{Name: "check", Usage: "write nothing; fail when a page differs from what the specs render"},
		},
		Action: func(c *cli.Context) error {
			env, dir := service.GlobalEnvironment(), c.String("dir")
			if !c.Bool("check") {
				return docsgen.WriteAll(env, dir)
			}
			stale, err := docsgen.Drift(env, dir)
			if err != nil {
				return err
			}
			if len(stale) > 0 {
				return cli.Exit(fmt.Sprintf("out of date (run `make docs`): %v", stale), 1)
			}
			return nil
		},
	}
}
