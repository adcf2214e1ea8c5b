package main

import (
	"os"
	"os/exec"
	"testing"
)

// The official openai Python package works against kvgate. It needs the
// package installed (make openai-sdk-test installs it, pinned, and sets
// KVGATE_OPENAI_PYTHON); without it the test is skipped.
func TestOpenAIPythonSDK(t *testing.T) {
	python := os.Getenv("KVGATE_OPENAI_PYTHON")
	if python == "" {
		t.Skip("KVGATE_OPENAI_PYTHON is not set: run make openai-sdk-test")
	}
	hr := startHTTPRouter(t, "--api-key", "sk-sdk", "--max-request-bytes", "65536")
	cmd := exec.Command(python, "../../scripts/openai_sdk_check.py")
	cmd.Env = append(os.Environ(), "KVGATE_OPENAI_BASE_URL="+hr.url+"/v1", "KVGATE_OPENAI_API_KEY=sk-sdk")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("openai_sdk_check.py: %v", err)
	}
}

// The official openai npm package works against kvgate. It needs the
// package installed (make openai-sdk-test runs npm ci in
// scripts/openai-node and sets KVGATE_OPENAI_NODE); without it the test is
// skipped.
func TestOpenAINodeSDK(t *testing.T) {
	node := os.Getenv("KVGATE_OPENAI_NODE")
	if node == "" {
		t.Skip("KVGATE_OPENAI_NODE is not set: run make openai-sdk-test")
	}
	hr := startHTTPRouter(t, "--api-key", "sk-sdk", "--max-request-bytes", "65536")
	cmd := exec.Command(node, "check.mjs")
	cmd.Dir = "../../scripts/openai-node"
	cmd.Env = append(os.Environ(), "KVGATE_OPENAI_BASE_URL="+hr.url+"/v1", "KVGATE_OPENAI_API_KEY=sk-sdk")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("check.mjs: %v", err)
	}
}
