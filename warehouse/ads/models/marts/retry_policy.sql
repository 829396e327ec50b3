{#-
    How each tenant's client retries each model (the chains of int_retry_chains): its retries of
    answers a retry cannot mend (the previous attempt's status a 4xx other than 408 and 429) and its
    chains longer than retry_chain_limit attempts, with what those retries spent. A row per tenant
    and model with retries on the day; calls without a model are left out. A chain that crosses
    midnight counts on each day it has attempts, its length there the attempts up to that day's last.
-#}
{%- set chain_limit = var('retry_chain_limit') -%}

with

attempts as (

    select * from {{ ref('int_retry_chains') }}
    where model is not null

),

retried_chains as (

    select
        event_date,
        tenant_id,
        model,
        chain_id,
        max(attempt_number) as chain_length

    from attempts
    group by event_date, tenant_id, model, chain_id
    having count(*) filter (where is_retry) > 0

),

chain_counts as (

    select
        event_date,
        tenant_id,
        model,
        count(*) as chains,
        count(*) filter (where chain_length > {{ chain_limit }}) as long_chains,
        cast(max(chain_length) as bigint) as longest_chain

    from retried_chains
    group by event_date, tenant_id, model

),

retry_counts as (

    select
        event_date,
        tenant_id,
        model,
        count(*) as retries,
        count(*) filter (
            where previous_status_code between 400 and 499 and previous_status_code not in (408, 429)
        ) as non_retryable_retries,
        cast(coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0) as bigint) as retry_tokens,
        {{ exact_sum('inference_ms') }} as retry_inference_ms,
        cast(sum(cost_usd) as decimal(18, 9)) as retry_cost_usd

    from attempts
    where is_retry
    group by event_date, tenant_id, model

),

final as (

    select
        retry_counts.event_date,
        retry_counts.tenant_id,
        retry_counts.model,
        chain_counts.chains,
        retry_counts.retries,
        retry_counts.non_retryable_retries,
        chain_counts.long_chains,
        chain_counts.longest_chain,
        retry_counts.retry_tokens,
        retry_counts.retry_inference_ms,
        retry_counts.retry_cost_usd,
        cast({{ chain_limit }} as bigint) as chain_limit,
        retry_counts.non_retryable_retries > 0 or chain_counts.long_chains > 0 as is_flagged

    -- the same keys: a retry's chain is a retried chain of its tenant and model
    from retry_counts
    inner join chain_counts
        on retry_counts.event_date = chain_counts.event_date
        and retry_counts.tenant_id = chain_counts.tenant_id
        and retry_counts.model = chain_counts.model

)

select * from final
