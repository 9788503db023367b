// Copy the dashboard's pinned browser libraries from an `npm ci` tree into static/vendor/
// and write static/vendor/MANIFEST.json (package, version, license, file, sha256). `make web`
// runs it; the files it writes are committed, so that installing weir needs no Node.js and
// the shipped files are exactly the released ones.
//
// Usage: node vendor.mjs NODE_MODULES VENDOR_DIR
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

// package -> [its distributed files to ship, our folder for them]. Each package's LICENSE is
// copied beside them; dagre's ES module build bundles graphlib, whose LICENSE goes too.
const FILES = {
  "preact": [["dist/preact.module.js", "hooks/dist/hooks.module.js", "LICENSE"], "preact"],
  "htm": [["dist/htm.module.js", "LICENSE"], "htm"],
  "@dagrejs/dagre": [["dist/dagre.esm.js", "dist/dagre.esm.js.LEGAL.txt", "LICENSE"], "dagre"],
  "@dagrejs/graphlib": [["LICENSE"], "dagre/graphlib"],
  "uplot": [["dist/uPlot.esm.js", "dist/uPlot.min.css", "LICENSE"], "uplot"],
};

const [nodeModules, target] = process.argv.slice(2);
if (!nodeModules || !target) {
  console.error("usage: node vendor.mjs NODE_MODULES VENDOR_DIR");
  process.exit(2);
}
rmSync(target, { recursive: true, force: true });
const entries = [];
for (const [pkg, [files, folder]] of Object.entries(FILES)) {
  const meta = JSON.parse(readFileSync(join(nodeModules, pkg, "package.json"), "utf8"));
  for (const name of files) {
    const file = `${folder}/${basename(name)}`;
    const destination = join(target, file);
    mkdirSync(dirname(destination), { recursive: true });
    copyFileSync(join(nodeModules, pkg, name), destination);
    const sha256 = createHash("sha256").update(readFileSync(destination)).digest("hex");
    entries.push({ package: pkg, version: meta.version, license: meta.license || "", file, sha256 });
  }
}
writeFileSync(join(target, "MANIFEST.json"), JSON.stringify(entries, null, 1) + "\n");
console.log(`${entries.length} files in ${target}`);
