import { Layer } from "effect"
import { ApiKeys } from "../ApiKeys.ts"
import { ApiKeysRepo } from "../ApiKeys/ApiKeysRepo.ts"
import { checkedFirst, KeysConfig } from "../Config.ts"
import { SqlExistingLive, SqlLive } from "../Database/Sql.ts"
import { Ids } from "../Ids.ts"

/** The key store on the server's database, as the key commands use it (docs/operators.md, The key command line). */
const keysOn = <E, R>(sql: Layer.Layer<Layer.Layer.Success<typeof SqlLive>, E, R>) =>
  ApiKeys.Live.pipe(
    Layer.provide(ApiKeysRepo.Live),
    Layer.provide(sql),
    Layer.provide(Ids.Live),
    checkedFirst(KeysConfig)
  )

/**
 * The key store alone, on the server's database: for `keys create` (and the tests), which makes a
 * new SQLite database where there is none.
 */
export const KeysLive = keysOn(SqlLive)

/** The same for the other key commands, which refuse a database that is not there (docs/operators.md, The key command line). */
export const KeysOfExistingLive = keysOn(SqlExistingLive)
