// Validates Kubernetes manifests against the Kubernetes schemas, for
// test_k8s_manifests.py (which installs the npm packages and checks flags and
// ports against the binaries).
//
//   node test_k8s_manifests.mjs NPM_PREFIX FILE.yaml... [--plain FILE.yaml...]
//
// Each YAML document of a manifest FILE is checked twice:
//   - kubernetes-models' validator for its apiVersion/kind (the API's OpenAPI
//     schema: types, required fields, enums, formats);
//   - TypeScript's excess-property check against kubernetes-models' types
//     (the schemas allow unknown fields; `kubectl apply` rejects them): the
//     documents are written as typed constants into NPM_PREFIX/check/manifests.mts
//     (where the packages resolve) and
//     type-checked with tsc.
// Files after --plain are only parsed (e.g. docker-compose.yml). Prints one
// JSON object: {"docs": [{"file", "doc"}], "plain": [{"file", "doc"}],
// "errors": ["file #i Kind/name: message"]}. Exit 0 when it ran (errors
// listed), 2 on a usage or setup error.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [prefixArg, ...rest] = process.argv.slice(2);
if (!prefixArg) {
  console.error("usage: node test_k8s_manifests.mjs NPM_PREFIX FILE.yaml... [--plain FILE...]");
  process.exit(2);
}
const plainAt = rest.indexOf("--plain");
const manifests = plainAt < 0 ? rest : rest.slice(0, plainAt);
const plainFiles = plainAt < 0 ? [] : rest.slice(plainAt + 1);
const prefix = resolve(prefixArg);
const modules = join(prefix, "node_modules");
const YAML = createRequire(join(prefix, "package.json"))("yaml");

const errors = [];
function parseAll(file) {
  const docs = [];
  for (const d of YAML.parseAllDocuments(readFileSync(file, "utf8"))) {
    if (d.errors.length) {
      errors.push(`${file}: YAML: ${d.errors.map((e) => e.message).join("; ")}`);
      continue;
    }
    const doc = d.toJS();
    if (doc !== null && doc !== undefined) docs.push(doc);
  }
  return docs;
}

// "apps/v1" + "StatefulSet" -> kubernetes-models/apps/v1/StatefulSet
function modelPath(doc) {
  const [group, version] = doc.apiVersion.includes("/") ? doc.apiVersion.split("/")
                                                          : [null, doc.apiVersion];
  return (group ? `${group}/` : "") + `${version}/${doc.kind}`;
}

const out = { docs: [], plain: [], errors };
const typed = [];
for (const file of manifests) {
  parseAll(file).forEach((doc, i) => {
    out.docs.push({ file, doc });
    const where = `${basename(file)} #${i} ${doc.kind}/${doc.metadata && doc.metadata.name}`;
    if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") {
      errors.push(`${where}: no apiVersion/kind`);
      return;
    }
    typed.push({ where, path: modelPath(doc), doc });
  });
}
for (const t of typed) {
  let Model;
  try {
    Model = (await import(pathToFileURL(join(modules, "kubernetes-models", t.path + ".js"))))[
      t.doc.kind];
  } catch (e) {
    errors.push(`${t.where}: no schema for ${t.doc.apiVersion} ${t.doc.kind}`);
    continue;
  }
  try {
    new Model(t.doc).validate();
  } catch (e) {
    errors.push(`${t.where}: schema: ${e.message}`);
  }
}

// The strict (unknown field) check: one typed constant per document.
const checkDir = join(prefix, "check");
mkdirSync(checkDir, { recursive: true });
const ts = typed.map((t, i) =>
  `import type { I${t.doc.kind} as T${i} } from "kubernetes-models/${t.path}";\n` +
  `// ${t.where}\nexport const doc${i}: T${i} = ${JSON.stringify(t.doc)};\n`).join("");
const tsFile = join(checkDir, "manifests.mts");
writeFileSync(tsFile, ts);
try {
  execFileSync(process.execPath, [join(modules, "typescript", "bin", "tsc"), "--noEmit",
    "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext",
    tsFile], { cwd: prefix, encoding: "utf8" });
} catch (e) {
  // tsc's lines name manifests.mts(LINE,COL); the comment above each constant
  // names the document.
  errors.push(`strict check (unknown or mistyped fields, see ${tsFile}):\n${e.stdout || e.message}`);
}

for (const file of plainFiles) {
  for (const doc of parseAll(file)) out.plain.push({ file, doc });
}
console.log(JSON.stringify(out));
