// Package floe is the cgo binding to libfloe, the Rust data plane behind the
// Benthos `iceberg` output. All #cgo directives live in this file.
package floe

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -lfloe -lm -ldl -lpthread
#include <stdlib.h>
#include "floe.h"
*/
import "C"
