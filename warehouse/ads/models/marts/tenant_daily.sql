with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date') }}

),

tenant_quotas as (

    select * from {{ ref('stg_dwd__tenant_quotas') }}

),

tenant_totals as (

    select
        event_date,
        tenant_id,
        count(*) as requests,
        cast(coalesce(sum(input_tokens), 0) as bigint) as input_tokens,
        cast(coalesce(sum(output_tokens), 0) as bigint) as output_tokens,
        cast(coalesce(sum(cached_input_tokens), 0) as bigint) as cached_input_tokens,
        cast(sum(cost_usd) as decimal(18, 9)) as cost_usd,
        count(*) filter (where cost_usd is null) as unpriced_requests,
        count(*) filter (where is_error) as errors,
        count(*) filter (where error_type = 'rate_limited' or status_code = 429) as rate_limited,
        count(distinct model) as models_used

    from requests
    group by event_date, tenant_id

),

costs_by_model as (

    select
        event_date,
        tenant_id,
        model,
        sum(cost_usd) as cost_usd

    from requests
    where cost_usd is not null
    group by event_date, tenant_id, model

),

top_models as (

    select
        event_date,
        tenant_id,
        model as top_model_by_cost,
        cast(cost_usd as decimal(18, 9)) as top_model_cost_usd

    from costs_by_model
    qualify row_number() over (partition by event_date, tenant_id order by cost_usd desc, model) = 1

),

quotas_in_effect as (

    -- The quota row in effect on the day: the latest effective_from on or before it.
    select
        tenant_totals.event_date,
        tenant_totals.tenant_id,
        tenant_quotas.daily_request_quota,
        tenant_quotas.daily_token_quota

    from tenant_totals
    asof left join tenant_quotas
        on tenant_totals.tenant_id = tenant_quotas.tenant_id
        and tenant_totals.event_date >= tenant_quotas.effective_from

),

final as (

    select
        tenant_totals.event_date,
        tenant_totals.tenant_id,
        tenant_totals.requests,
        tenant_totals.input_tokens,
        tenant_totals.output_tokens,
        tenant_totals.cached_input_tokens,
        tenant_totals.input_tokens + tenant_totals.output_tokens as total_tokens,
        tenant_totals.cost_usd,
        tenant_totals.unpriced_requests,
        tenant_totals.errors,
        tenant_totals.errors / tenant_totals.requests as error_rate,
        tenant_totals.rate_limited,
        tenant_totals.models_used,
        top_models.top_model_by_cost,
        top_models.top_model_cost_usd,
        quotas_in_effect.daily_request_quota,
        quotas_in_effect.daily_token_quota,
        tenant_totals.requests / quotas_in_effect.daily_request_quota as request_quota_used,
        (tenant_totals.input_tokens + tenant_totals.output_tokens)
            / quotas_in_effect.daily_token_quota as token_quota_used,
        coalesce(tenant_totals.requests > quotas_in_effect.daily_request_quota, false)
            or coalesce(tenant_totals.input_tokens + tenant_totals.output_tokens
                        > quotas_in_effect.daily_token_quota, false) as is_over_quota

    from tenant_totals
    left join top_models
        on tenant_totals.event_date = top_models.event_date
        and tenant_totals.tenant_id = top_models.tenant_id
    left join quotas_in_effect
        on tenant_totals.event_date = quotas_in_effect.event_date
        and tenant_totals.tenant_id = quotas_in_effect.tenant_id

)

select * from final
