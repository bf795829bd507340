package lintcheck

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// Hook wires Check into the Benthos CLI (service.RunCLIToCode):
//
//   - `lint`: Benthos v4.60 has no option that adds lints to its lint command, but
//     every command's action first calls the function given to
//     service.CLIOptCustomRunFlags, with the parsed command line (after `-e` env
//     files were applied). For `lint` the hook checks the same targets Benthos
//     lints (arguments, `-c`, with the `-r` resources) and prints its findings in
//     the format of Benthos' lint lines; Benthos' own lint lines follow. Benthos'
//     lint fails on every lint it prints (it has lint levels internally, but its
//     lint command exits 1 on any of them, warnings included), so a finding fails
//     lint too: ExitCode turns a 0 into 1.
//   - `run` (and the root command): service.CLIOptOnConfigParse is called with the
//     parsed main config (environment variables interpolated, `--set` applied)
//     once the logger exists, before the stream starts; the hook logs each finding
//     as a warning there, checking the `-r` resource files the CLI function saw
//     too. It never stops the run. `streams` mode is not checked (its stream
//     configs are read later, one by one).
//
// With Sections set, both also check every iceberg output section as written (see
// Hook.Sections).
//
// Both options are single-slot in Benthos: a binary that needs them for something
// else must call the hook's methods from its own functions.
type Hook struct {
	// Stderr receives the lint lines (os.Stderr when nil).
	Stderr io.Writer
	// LookupEnv resolves `${VAR}` in files the hook reads (os.LookupEnv when nil).
	LookupEnv func(string) (string, bool)
	// Sections, when set, checks every iceberg output section: `lint` prints its
	// problems at their fields' lines (LintSections); `run`, where Benthos would stop
	// at a section's first value of a wrong type, stops there with all of them. SectionsLinted is called before lint checks them: the floe binary makes
	// the output's own lint rule quiet there, so no line is printed twice.
	Sections       SectionCheck
	SectionsLinted func()

	lintFound bool
	resources []string
}

// CLIOpts returns the options to pass to service.RunCLI / RunCLIToCode.
func (h *Hook) CLIOpts() []service.CLIOptFunc {
	return []service.CLIOptFunc{
		service.CLIOptCustomRunFlags(nil, h.BeforeCommand),
		service.CLIOptOnConfigParse(h.OnConfigParse),
	}
}

// ExitCode is the process exit code for the CLI's code: 1 when lint printed a
// finding and Benthos found nothing else.
func (h *Hook) ExitCode(code int) int {
	if code == 0 && h.lintFound {
		return 1
	}
	return code
}

func (h *Hook) lookup() func(string) (string, bool) {
	if h.LookupEnv != nil {
		return h.LookupEnv
	}
	return os.LookupEnv
}

// BeforeCommand runs at the start of a command's action: lint checks its targets
// here; other commands remember the `-r` resource paths for OnConfigParse.
func (h *Hook) BeforeCommand(c *cli.Context) error {
	resources := stringSliceUp(c, "resources")
	if c.Command == nil || c.Command.Name != "lint" {
		h.resources = resources
		return nil
	}
	targets, err := ExpandTargets(c.Args().Slice())
	if err != nil {
		return nil // Benthos reports the same error
	}
	if conf := c.String("config"); conf != "" {
		targets = append(targets, conf)
	}
	w := h.Stderr
	if w == nil {
		w = os.Stderr
	}
	if LintFiles(w, targets, resources, h.lookup()) {
		h.lintFound = true
	}
	if h.Sections != nil {
		if h.SectionsLinted != nil {
			h.SectionsLinted()
		}
		if LintSections(w, targets, resources, h.lookup(), h.Sections) {
			h.lintFound = true
		}
	}
	return nil
}

// OnConfigParse logs a warning for each finding in the parsed main config.
func (h *Hook) OnConfigParse(pConf *service.ParsedConfig) error {
	root, err := pConf.FieldAny()
	if err != nil {
		return nil
	}
	var n yaml.Node
	if err := n.Encode(root); err != nil {
		return nil
	}
	var res []Doc
	paths, _ := Globs(h.resources)
	for _, p := range paths {
		if d, _, err := ReadDoc(p, h.lookup()); err == nil {
			res = append(res, d)
		}
	}
	for _, f := range Check(Doc{Root: &n}, res...) {
		pConf.Resources().Logger().Warnf("%s", f.Message)
	}
	if h.Sections != nil {
		return sectionsAtStartUp(pConf.Resources().Logger(), Doc{Root: &n}, res, h.Sections)
	}
	return nil
}

// sectionsAtStartUp stops a start-up that Benthos' reading of an iceberg output section
// would stop at its first value of a wrong type, logging every problem of the config's
// sections (the main config's and the resource files') as an error first: the lines
// `floe lint` prints, all of them. Sections that read leave their problems to the
// output's constructor, which names them all.
func sectionsAtStartUp(log *service.Logger, main Doc, res []Doc, check SectionCheck) error {
	var problems []sectionProblem
	undecodable := false
	for _, d := range append([]Doc{main}, res...) {
		for _, p := range checkSections(d, check) {
			if d.Name != "" {
				p.section += " in " + d.Name
			}
			problems = append(problems, p)
			undecodable = undecodable || p.undecodable
		}
	}
	if !undecodable {
		return nil
	}
	texts := make([]string, len(problems))
	for i, p := range problems {
		texts[i] = fmt.Sprintf("%s: %s", p.section, p.text)
		log.Errorf("iceberg output config: %s", texts[i])
	}
	return fmt.Errorf("the iceberg output config has %d problem(s): %s", len(texts), strings.Join(texts, "; "))
}

// stringSliceUp reads a flag from the innermost command that set it, as Benthos
// reads `-r` (a subcommand's own flag, else the root's).
func stringSliceUp(c *cli.Context, name string) []string {
	for _, cc := range c.Lineage() {
		if v := cc.StringSlice(name); len(v) > 0 {
			return v
		}
	}
	return nil
}
