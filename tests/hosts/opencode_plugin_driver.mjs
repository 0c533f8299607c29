// Runs Baton's OpenCode plugin the way OpenCode calls it (the hooks of @opencode-ai/plugin
// 1.18's Hooks type, the events of @opencode-ai/sdk's Event type), for tests: two sessions in
// one folder, the first with a prompt and an edit. Prints what the second session's system
// prompt was given. Usage: node opencode_plugin_driver.mjs PLUGIN_FILE FOLDER
import { pathToFileURL } from "node:url";

const [pluginFile, folder] = process.argv.slice(2);
const { BatonPlugin } = await import(pathToFileURL(pluginFile).href);
const hooks = await BatonPlugin({ directory: folder, worktree: folder });
const session = (id) => ({ id, projectID: "p", directory: folder, title: `session ${id}`, version: "1" });

await hooks.event({ event: { type: "session.created", properties: { info: session("oc-1") } } });
await hooks["chat.message"](
  { sessionID: "oc-1" },
  { message: {}, parts: [{ type: "text", text: "fix the login redirect bug", id: "t1", sessionID: "oc-1", messageID: "m1" }] },
);
await hooks["tool.execute.after"](
  { tool: "edit", sessionID: "oc-1", callID: "c1", args: { filePath: `${folder}/src/login.ts` } },
  { title: "edit", output: "applied", metadata: {} },
);
await hooks.event({ event: { type: "session.idle", properties: { sessionID: "oc-1" } } });
await hooks.event({ event: { type: "session.deleted", properties: { info: session("oc-1") } } });

await hooks.event({ event: { type: "session.created", properties: { info: session("oc-2") } } });
const output = { system: ["You are OpenCode."] };
await hooks["experimental.chat.system.transform"]({ sessionID: "oc-2", model: {} }, output);
console.log(JSON.stringify(output.system));
