// Validates rendered Kubernetes objects (a JSON array, the file argv[2])
// against the Kubernetes OpenAPI schema, as packaged by kubernetes-models
// (its models are generated from the API's OpenAPI document; validate() is
// @kubernetes-models/validate's ajv): types, enums, formats, required
// fields. Their validators let unknown fields through, as the JSON schema
// does; the API server's fieldValidation=Strict does not, so the same
// objects are also written as TypeScript literals typed by the models'
// interfaces and compiled with tsc --strict, whose excess-property check
// refuses any field the schema does not name. Prints a JSON report;
// exits 1 when any object is refused.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const objects = JSON.parse(readFileSync(process.argv[2], "utf8"));

// "apps/v1" + Deployment -> "kubernetes-models/apps/v1/Deployment"
const modulePath = (o) => `kubernetes-models/${o.apiVersion}/${o.kind}`;

const report = { objects: objects.length, kinds: [], schema_errors: [], type_errors: "" };
for (const [i, o] of objects.entries()) {
  const where = `${i}: ${o.kind}/${o.metadata?.name}`;
  let Model;
  try {
    Model = (await import(modulePath(o)))[o.kind];
  } catch (e) {
    report.schema_errors.push(`${where}: no model for ${o.apiVersion} ${o.kind}: ${e.message}`);
    continue;
  }
  report.kinds.push(`${o.apiVersion}/${o.kind}`);
  try {
    new Model(o).validate();
  } catch (e) {
    report.schema_errors.push(`${where}: ${e.message}`);
  }
}

const dir = mkdtempSync(join(here, ".k8s-validate-"));
try {
  const lines = objects.map((o, i) => `import type { I${o.kind} as T${i} } from "${modulePath(o)}";`);
  objects.forEach((o, i) => lines.push(`export const o${i}: T${i} = ${JSON.stringify(o)};`));
  writeFileSync(join(dir, "objects.ts"), lines.join("\n") + "\n");
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "nodenext", moduleResolution: "nodenext",
                       types: [], skipLibCheck: true },
    files: ["objects.ts"],
  }));
  try {
    execFileSync(join(here, "node_modules", ".bin", "tsc"), ["-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
  } catch (e) {
    report.type_errors = (e.stdout || "") + (e.stderr || "") || String(e);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(JSON.stringify(report, null, 2));
process.exit(report.schema_errors.length || report.type_errors ? 1 : 0);
