// Command go_panic (test program) panics in a called function, whatever its payload: the
// task's error must show the panic's message and where it happened.
package main

import (
	"io"
	"os"
)

func checkBalance(balance int) {
	if balance < 0 {
		panic("the ledger is corrupt: negative balance")
	}
}

func main() {
	_, _ = io.ReadAll(os.Stdin)
	checkBalance(-1)
}
