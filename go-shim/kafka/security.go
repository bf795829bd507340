package kafka

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func saslField() *service.ConfigField {
	return service.NewObjectListField("sasl",
		service.NewStringEnumField("mechanism", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512").
			Description("The SASL mechanism."),
		service.NewStringField("username").Default("").Description("The SASL user name."),
		service.NewStringField("password").Default("").Secret().Description("The SASL password (never printed, also not when the broker refuses it)."),
	).Optional().Advanced().
		Description("SASL mechanisms to try, in order.")
}

// securityOpts reads `tls` and `sasl` into franz-go options.
func securityOpts(conf *service.ParsedConfig) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tlsConf, tlsOn, err := conf.FieldTLSToggled("tls")
	if err != nil {
		return nil, err
	}
	if tlsOn {
		opts = append(opts, kgo.DialTLSConfig(tlsConf))
	}
	if !conf.Contains("sasl") {
		return opts, nil
	}
	entries, err := conf.FieldObjectList("sasl")
	if err != nil {
		return nil, err
	}
	var mechs []sasl.Mechanism
	for i, e := range entries {
		m, err := saslMechanism(e)
		if err != nil {
			return nil, fmt.Errorf("sasl[%d]: %w", i, err)
		}
		mechs = append(mechs, m)
	}
	if len(mechs) > 0 {
		opts = append(opts, kgo.SASL(mechs...))
	}
	return opts, nil
}

func saslMechanism(e *service.ParsedConfig) (sasl.Mechanism, error) {
	name, err := e.FieldString("mechanism")
	if err != nil {
		return nil, err
	}
	user, err := e.FieldString("username")
	if err != nil {
		return nil, err
	}
	pass, err := e.FieldString("password")
	if err != nil {
		return nil, err
	}
	if user == "" {
		return nil, fmt.Errorf("%s needs a username", name)
	}
	switch name {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("mechanism %q is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", name)
}

func splitComma(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parseBytes reads sizes such as 1048576, 512KB, 1MiB, 50MB (KB/MB/GB are powers of 1024,
// as kafka_franz reads them).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		scale  int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), 10, 64)
			if err == nil && (n > math.MaxInt64/u.scale || n < math.MinInt64/u.scale) {
				return 0, fmt.Errorf("%q overflows", s)
			}
			return n * u.scale, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// franzLogger passes franz-go's warnings and errors to the host's logger.
type franzLogger struct{ log *service.Logger }

func (l franzLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l franzLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	line := msg
	for i := 0; i+1 < len(keyvals); i += 2 {
		line += fmt.Sprintf(" %v=%v", keyvals[i], keyvals[i+1])
	}
	switch level {
	case kgo.LogLevelError:
		l.log.Errorf("kafka_franz: %s", line)
	case kgo.LogLevelWarn:
		l.log.Warnf("kafka_franz: %s", line)
	}
}
