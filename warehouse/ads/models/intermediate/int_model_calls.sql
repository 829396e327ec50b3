{{ config(materialized='view') }}

-- The requests that called a model: a tool's or an agent's step (execute_tool, invoke_agent,
-- create_agent) names none and counts only as a step of its trace.
select * from {{ ref('stg_dwd__requests') }}
where model is not null
