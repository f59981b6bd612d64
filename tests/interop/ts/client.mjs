// The official TypeScript MCP SDK against pdag's server: connect, list tools, call three of them, print one JSON
// line on stdout for tests/test_interop_ts.py to check. The SDK's client checks each structuredContent against the
// tool's outputSchema (ajv) and throws when they disagree, so a call that returns here also passed that check.
//
//   node client.mjs stdio <python> <pdag checkout>   starts `python -m server` itself
//   node client.mjs http <url>                       connects to a running `python -m server --http`
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const PLAN = { model: "llama-3.1-8b", hardware: { gpu: "h100-sxm", num_gpus: 2 }, parallel: { tp: 2 } };
const CALLS = [
  ["lookup_rule", { rule_id: "tp-heads-divisible" }],
  ["build_dag", { plan: PLAN }],
  ["validate_dag", { plan: { ...PLAN, parallel: { tp: 3 } } }],
  ["build_dag", { plan: { ...PLAN, parallel: { tp: -1 } } }],
];

function transportFor(argv) {
  const [kind, ...rest] = argv;
  if (kind === "stdio" && rest.length === 2) {
    const [python, cwd] = rest;
    return new StdioClientTransport({ command: python, args: ["-m", "server"], cwd, env: { PYTHONPATH: cwd },
      stderr: "inherit" });
  }
  if (kind === "http" && rest.length === 1) return new StreamableHTTPClientTransport(new URL(rest[0]));
  throw new Error("usage: node client.mjs stdio <python> <pdag checkout> | http <url>");
}

const client = new Client({ name: "pdag-interop-ts", version: "0" });
let protocolVersion = null;
const transport = transportFor(process.argv.slice(2));
const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (v) => { protocolVersion = v; setProtocolVersion?.(v); };
await client.connect(transport);
const { tools } = await client.listTools();
const calls = [];
for (const [name, args] of CALLS) {
  const r = await client.callTool({ name, arguments: args });
  calls.push({ name, isError: r.isError === true, structuredContent: r.structuredContent ?? null,
    text: r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n") });
}
await client.close();
process.stdout.write(JSON.stringify({
  server: client.getServerVersion(),
  protocolVersion,
  tools: tools.map((t) => ({ name: t.name, inputType: t.inputSchema.type, hasOutputSchema: "outputSchema" in t })),
  calls,
}) + "\n");
