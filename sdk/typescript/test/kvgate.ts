// startKvgate runs `kvgate serve` on its embedded default (simulated engines
// in-process) on a free loopback port, and reads the address it serves on
// from its "kvgate serving" log line. The binary is $KVGATE_BIN, else the one
// `make build` writes to bin/kvgate.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export interface Kvgate {
  baseUrl: string;
  stop(): Promise<void>;
}

export function startKvgate(): Promise<Kvgate> {
  const bin = process.env.KVGATE_BIN ?? fileURLToPath(new URL("../../../../bin/kvgate", import.meta.url));
  const child: ChildProcess = spawn(bin, ["serve", "--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    child.kill("SIGTERM");
    await exited;
  };
  return new Promise((resolve, reject) => {
    const log: string[] = [];
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`kvgate exited (${code}) before serving:\n${log.join("\n")}`)));
    const lines = createInterface({ input: child.stderr! });
    lines.on("line", (line) => {
      log.push(line);
      const m = /msg="kvgate serving" grpc=(\S+)/.exec(line);
      if (m) {
        resolve({ baseUrl: `http://${m[1]}`, stop });
      }
    });
  });
}
