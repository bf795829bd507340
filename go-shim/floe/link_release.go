//go:build !floe_failpoints

package floe

// #cgo LDFLAGS: -L${SRCDIR}/../../target/release -lfloe -lm -ldl -lpthread
import "C"
