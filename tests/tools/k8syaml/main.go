// Command k8syaml reads YAML the way kubectl reads a manifest file and prints
// what kubectl would send: the JSON of every document.
//
// kubectl (create/apply -f) splits a stream with apimachinery's
// YAMLOrJSONDecoder (a line-based "---" reader) and converts each document
// with sigs.k8s.io/yaml (go-yaml v2, YAML 1.1 resolution: y/n/on/off are
// booleans, 0o17/1_000/1e3 are numbers), skipping empty and null documents.
// kdist's tests compare this JSON with what kdist meant to write.
//
// Usage:
//
//	k8syaml        stdin is one YAML stream; stdout is a JSON array of its documents
//	k8syaml -0     stdin is NUL-terminated YAML streams; stdout has one JSON line per
//	               stream, {"docs": [...]} or {"error": "..."}, written as soon as the
//	               stream is read, so one long-lived process checks many examples
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// readStream returns every non-empty document of one YAML stream as JSON,
// exactly as kubectl's resource builder (StreamVisitor) decodes a file.
func readStream(data []byte) ([]json.RawMessage, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	docs := []json.RawMessage{}
	for {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, err
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue // kubectl skips these too
		}
		docs = append(docs, raw)
	}
}

func main() {
	batch := flag.Bool("0", false, "stdin holds NUL-terminated YAML streams")
	flag.Parse()
	if *batch {
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "k8syaml:", err)
			os.Exit(2)
		}
		return
	}
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8syaml:", err)
		os.Exit(2)
	}
	docs, err := readStream(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8syaml:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(docs)
	os.Stdout.Write(append(line, '\n'))
}

// serve answers each NUL-terminated stream with one JSON line as soon as it is
// read, so a test can keep one process and check examples one at a time.
func serve(in io.Reader, out io.Writer) error {
	reader := bufio.NewReaderSize(in, 1<<20)
	writer := bufio.NewWriter(out)
	for {
		stream, err := reader.ReadBytes(0)
		if errors.Is(err, io.EOF) && len(stream) == 0 {
			return writer.Flush()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var res any
		if docs, perr := readStream(bytes.TrimSuffix(stream, []byte{0})); perr != nil {
			res = map[string]string{"error": perr.Error()}
		} else {
			res = map[string][]json.RawMessage{"docs": docs}
		}
		line, _ := json.Marshal(res)
		writer.Write(append(line, '\n'))
		if ferr := writer.Flush(); ferr != nil {
			return ferr
		}
	}
}
