import CreateTables from "./0001_create_tables.ts"
import ApiKeysGeneration from "./0002_api_keys_generation.ts"
import ActivationReads from "./0003_activation_reads.ts"
import CampaignCounts from "./0004_campaign_counts.ts"
import KeyLifecycle from "./0005_key_lifecycle.ts"
import ListByBothFilters from "./0006_list_by_both_filters.ts"
import CreatorFirstDays from "./0007_creator_first_days.ts"
import KeyChangeAnnouncements from "./0008_key_change_announcements.ts"

/** The one migration set: portable SQL, with a per-dialect branch where SQLite and PostgreSQL differ. */
export const migrations = {
  "0001_create_tables": CreateTables,
  "0002_api_keys_generation": ApiKeysGeneration,
  "0003_activation_reads": ActivationReads,
  "0004_campaign_counts": CampaignCounts,
  "0005_key_lifecycle": KeyLifecycle,
  "0006_list_by_both_filters": ListByBothFilters,
  "0007_creator_first_days": CreatorFirstDays,
  "0008_key_change_announcements": KeyChangeAnnouncements
}
