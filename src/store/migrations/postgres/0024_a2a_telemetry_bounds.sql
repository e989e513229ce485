-- The A2A bridge's telemetry rows are pruned by age and by count
-- (`[a2a_telemetry]`) and read per peer (console, /metrics): indexes on
-- what the prune and the per-peer reads scan.
CREATE INDEX a2a_task_instances_started ON a2a_task_instances(started_at);
CREATE INDEX a2a_hook_events_emitted ON a2a_hook_events(emitted_at);
CREATE INDEX a2a_cost_events_emitted ON a2a_cost_events(emitted_at);
CREATE INDEX a2a_cost_events_card ON a2a_cost_events(agent_card_id);
