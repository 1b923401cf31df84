// ESLint with Effect's own formatting (dprint, through @effect/eslint-plugin, as the Effect
// repository configures it): `bun run lint` checks, `bun run format` fixes. CI runs the check.
import * as effect from "@effect/eslint-plugin"
import js from "@eslint/js"
import tseslint from "typescript-eslint"

export default [
  {
    ignores: ["**/dist/**", "**/node_modules/**", "test/integrators/**", "bench/results/**"]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  ...effect.configs.dprint,
  {
    rules: {
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }],
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      // Terminal escapes and the bytes a hostile request is made of are what some patterns match.
      "no-control-regex": "off",
      "object-shorthand": "error",
      "require-yield": "off"
    }
  },
  {
    // The binary bundles what src imports: the platform's index would bring every module it has,
    // and evaluate them all at start (bench/BENCHMARKS.md, Memory).
    files: ["src/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", {
        paths: [{
          name: "@effect/platform",
          message: "Import the module by its own path (@effect/platform/HttpApi): the index brings the whole platform."
        }]
      }]
    }
  }
]
