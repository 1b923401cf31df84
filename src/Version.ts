import { version as packageVersion } from "../package.json" with { type: "json" }

/** The service's version, from package.json: `--version`, the OpenAPI document and traces say the same. */
export const version: string = packageVersion
